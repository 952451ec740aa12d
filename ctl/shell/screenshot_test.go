package shell

import (
	"bytes"
	"encoding/binary"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/ctl/rfb"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// vncFake is a launcher whose Vnc stream is a scripted RFB 3.8 server with
// a 2×1 screen (red, blue); noGraphics refuses the stream as the launcher
// does for a VM without a graphics device.
type vncFake struct {
	fakeLauncher
	noGraphics bool
}

func (f *vncFake) Vnc(stream grpc.BidiStreamingServer[rpc.StreamData, rpc.StreamData]) error {
	f.record("Vnc")
	if f.noGraphics {
		return status.Error(codes.FailedPrecondition, "launcher: the VM has no graphics device")
	}
	var in []byte
	read := func(n int) error { // n bytes from the client
		for len(in) < n {
			msg, err := stream.Recv()
			if err != nil {
				return err
			}
			in = append(in, msg.GetData()...)
		}
		in = in[n:]
		return nil
	}
	send := func(b []byte) error { return stream.Send(&rpc.StreamData{Data: b}) }
	update := []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0}
	update = append(update, 0, 0, 255, 0, 255, 0, 0, 0) // red, blue: B G R X each
	for _, step := range []struct {
		send []byte
		read int
	}{
		{[]byte(rfb.Version38), 12},
		{[]byte{1, 1}, 1},
		{[]byte{0, 0, 0, 0}, 1},
		{binary.BigEndian.AppendUint32(append([]byte{0, 2, 0, 1}, make([]byte, 16)...), 0), 20 + 12 + 10},
		{update, 0},
	} {
		if err := send(step.send); err != nil {
			return err
		}
		if err := read(step.read); err != nil {
			return err
		}
	}
	for { // until the client goes
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

func TestShellScreenshot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "screen.png")
	sock := startFake(t, &vncFake{})
	stdout, stderr, code := run(t, "", "shell", "--socket", sock, "-c", "screenshot "+file)
	if code != 0 || !strings.Contains(stdout, file+": 2x1") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r, g, b, _ := img.At(0, 0).RGBA(); r>>8 != 255 || g != 0 || b != 0 {
		t.Errorf("pixel (0,0) %v, want red", img.At(0, 0))
	}
	if r, g, b, _ := img.At(1, 0).RGBA(); r != 0 || g != 0 || b>>8 != 255 {
		t.Errorf("pixel (1,0) %v, want blue", img.At(1, 0))
	}

	for _, tc := range []struct {
		name, cmd, stderr string
		fake              *vncFake
	}{
		{"no file", "screenshot", "usage: screenshot FILE", &vncFake{}},
		{"two files", "screenshot a b", "usage: screenshot FILE", &vncFake{}},
		{"no graphics", "screenshot " + filepath.Join(dir, "none.png"), "FailedPrecondition: launcher: the VM has no graphics device", &vncFake{noGraphics: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := startFake(t, tc.fake)
			_, stderr, code := run(t, "", "shell", "--socket", sock, "-c", tc.cmd)
			if code != 1 || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr, tc.stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "none.png")); err == nil {
		t.Error("a file was written without a screenshot")
	}
}
