package launcher

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A QEMU that fails at start resets the monitor connection before its exit
// is reaped: dialQMP still reports QEMU's stderr (found by the e2e
// TestDataVolumeBoot, where QEMU could not reach a claim's disk.img and the
// VMI only said "QMP: ... connection reset by peer"). A monitor that fails
// while QEMU lives is reported as such, after the grace.
func TestDialQMPReportsQEMUExit(t *testing.T) {
	for _, tt := range []struct {
		name  string
		exits bool
		want  string
	}{
		{name: "QEMU exits after the reset", exits: true,
			want: "QEMU exited at start (exit status 1): qemu-system-x86_64: -blockdev ...: Could not open '/var/run/kemu/pvc/d/disk.img': Permission denied"},
		{name: "QEMU lives", want: "launcher: QMP: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "qmp.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			l := &Launcher{exited: make(chan struct{}), stderr: newTailBuffer(20, "QEMU")}
			l.paths.QMP = sock
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close() // QEMU died: no greeting
				if tt.exits {
					// The reaper sees the exit a little later.
					time.AfterFunc(100*time.Millisecond, func() {
						l.stderr.Write([]byte("qemu-system-x86_64: -blockdev ...: Could not open '/var/run/kemu/pvc/d/disk.img': Permission denied\\n"))
						l.exitErr = errors.New("exit status 1")
						close(l.exited)
					})
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := l.dialQMP(ctx)
			if err == nil {
				m.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want %q", err, tt.want)
			}
		})
	}
}
