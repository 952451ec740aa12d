//go:build qemu

package launcher

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// kbootMigrationVMI is an idle 256 MiB test guest booted from the
// kernel-boot image with no disk: nothing to mirror, only RAM moves, so
// the launcher's migration and a plain QEMU's compare like for like.
const kbootMigrationVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: migk}
spec:
  domain:
    memory: {guest: 256Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.dhcp=0
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices: {autoattachPodInterface: false}
`

// migrationPath turns a target's sockets into the ones the source
// connects to: direct below; a proxy variant returns its own listeners.
type migrationPath func(tb testing.TB, at MigrationTarget) MigrationTarget

// directPath connects the source straight to the target's sockets.
func directPath(_ testing.TB, at MigrationTarget) MigrationTarget { return at }

// launcherArgv starts a launcher for yaml once (incoming, so the guest
// never runs) and returns QEMU's argv without -incoming and the runtime
// directory it names (the files it refers to outside that
// directory, in the image cache, stay until the test ends).
func launcherArgv(tb testing.TB, yaml string) ([]string, string) {
	tb.Helper()
	cfg := newConfig(tb, parseVMI(tb, yaml))
	l, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if err := l.StartIncoming(ctx); err != nil {
		tb.Fatalf("start: %v", err)
	}
	// The launcher hands QEMU its QMP socket as an inherited fd; a plain
	// QEMU creates it at the same path instead.
	byFD, err := cmdline.SocketChardev{ID: cmdline.ChardevQMP, FD: l.paths.QMPFD}.Args()
	if err != nil {
		tb.Fatal(err)
	}
	byPath, err := cmdline.SocketChardev{ID: cmdline.ChardevQMP, Path: l.paths.QMP}.Args()
	if err != nil {
		tb.Fatal(err)
	}
	var argv []string
	for _, a := range l.Argv() {
		if n := len(argv); n > 0 && argv[n-1] == "-incoming" {
			argv = argv[:n-1] // startPlain adds it back for a target
			continue
		}
		if a == byFD[1] {
			a = byPath[1]
		}
		argv = append(argv, a)
	}
	if _, err := l.Kill(ctx); err != nil {
		tb.Fatal(err)
	}
	return argv, cfg.Dir
}

// plainQEMU is a QEMU the test starts itself, without a launcher: a
// launcher's argv with its runtime directory replaced.
type plainQEMU struct {
	cmd    *exec.Cmd
	mon    *qmp.Monitor
	dir    string
	w      *testguest.Watcher
	stderr bytes.Buffer
	exited chan struct{}
}

// startPlain runs argv (from launcherArgv, whose runtime directory is
// runDir) in a new directory; with incoming, paused for -incoming defer.
func startPlain(tb testing.TB, argv []string, runDir string, incoming bool) *plainQEMU {
	tb.Helper()
	p := &plainQEMU{dir: shortDir(tb), exited: make(chan struct{})}
	args := make([]string, 0, len(argv)+2)
	for _, a := range argv[1:] {
		args = append(args, strings.ReplaceAll(a, runDir, p.dir))
	}
	if incoming {
		args = append(args, "-incoming", "defer")
	}
	p.cmd = exec.Command(argv[0], args...)
	p.cmd.Stderr = &p.stderr
	// A test killed midway leaves no QEMU behind.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("plain QEMU: %v", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	tb.Cleanup(p.kill)
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	mon, err := qmp.Dial(ctx, filepath.Join(p.dir, "qmp.sock"))
	if err != nil {
		tb.Fatalf("plain QEMU's QMP: %v\n%s", err, p.stderr.String())
	}
	p.mon = mon
	c, err := net.Dial("unix", filepath.Join(p.dir, "serial.sock"))
	if err != nil {
		tb.Fatalf("plain QEMU's serial: %v", err)
	}
	p.w = testguest.NewWatcher(c)
	return p
}

// kill ends the plain QEMU (idempotent).
func (p *plainQEMU) kill() {
	if p.mon != nil {
		_ = p.mon.Close()
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	_ = os.RemoveAll(p.dir)
}

// listen sets the target's capabilities as the launcher does (events,
// late-block-activate; postcopy-ram if asked) and starts migrate-incoming
// on a unix socket in its directory that any user may connect to (the
// launcher's QEMU runs as 107).
func (p *plainQEMU) listen(tb testing.TB, postCopy bool) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	caps := []qmp.MigrationCapability{{Capability: qmp.CapEvents, State: true}, {Capability: qmp.CapLateBlockActivate, State: true}}
	if postCopy {
		caps = append(caps, qmp.MigrationCapability{Capability: qmp.CapPostcopyRAM, State: true})
	}
	if err := p.mon.MigrateSetCapabilities(ctx, caps); err != nil {
		tb.Fatalf("plain target capabilities: %v", err)
	}
	sock := filepath.Join(p.dir, MigrationSocketName)
	if err := p.mon.MigrateIncoming(ctx, "unix:"+sock); err != nil {
		tb.Fatalf("plain target migrate-incoming: %v", err)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{p.dir, 0o755}, {sock, 0o777}} {
		if err := os.Chmod(f.path, f.mode); err != nil {
			tb.Fatal(err)
		}
	}
	return sock
}

// plainMigrate migrates src's guest to dst (started incoming) over a unix
// socket in dst's directory with the launcher's capabilities and
// parameters (no copied disk), continues at pre-switchover and resumes
// the target at completed, as the launcher does. It returns the time
// from migrate to the target's RESUME and QEMU's downtime.
func plainMigrate(tb testing.TB, src, dst *plainQEMU, opts MigrationOptions) (total, downtime time.Duration) {
	tb.Helper()
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), migrationTimeout)
	defer cancel()
	must := func(what string, err error) {
		if err != nil {
			tb.Fatalf("plain migration: %s: %v", what, err)
		}
	}
	sock := dst.listen(tb, false)
	must("source capabilities", src.mon.MigrateSetCapabilities(ctx, []qmp.MigrationCapability{
		{Capability: qmp.CapEvents, State: true}, {Capability: qmp.CapPauseBeforeSwitch, State: true},
		{Capability: qmp.CapAutoConverge, State: opts.AllowAutoConverge}, {Capability: qmp.CapPostcopyRAM, State: false}}))
	p := qmp.MigrationParameters{MaxBandwidth: &opts.Bandwidth}
	if opts.DowntimeLimit > 0 {
		ms := opts.DowntimeLimit.Milliseconds()
		p.DowntimeLimit = &ms
	}
	must("source parameters", src.mon.MigrateSetParameters(ctx, p))
	srcEv := src.mon.Subscribe(qmp.WithFilter(qmp.AnyOf(qmp.EventMigration)), qmp.WithBuffer(64))
	defer srcEv.Close()
	dstEv := dst.mon.Subscribe(qmp.WithFilter(qmp.AnyOf(qmp.EventMigration, "RESUME")), qmp.WithBuffer(64))
	defer dstEv.Close()
	t0 := time.Now()
	must("migrate", src.mon.Migrate(ctx, "unix:"+sock))
	for {
		ev, err := srcEv.Next(ctx)
		must("source events", err)
		st := ev.String("status")
		if st == qmp.MigrationStatusPreSwitchover {
			must("migrate-continue", src.mon.MigrateContinue(ctx, st))
		}
		if st == qmp.MigrationStatusCompleted {
			break
		}
		if st == qmp.MigrationStatusFailed || st == qmp.MigrationStatusCancelled {
			tb.Fatalf("plain migration: %s", st)
		}
	}
	for {
		ev, err := dstEv.Next(ctx)
		must("target events", err)
		if ev.Name == "RESUME" {
			total = time.Since(t0)
			break
		}
		if st := ev.String("status"); st == qmp.MigrationStatusCompleted {
			must("cont", dst.mon.Cont(ctx))
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < finalQueries; i++ {
		info, err := src.mon.QueryMigrate(ctx)
		must("query-migrate", err)
		if info.TotalTime > 0 {
			return total, time.Duration(info.Downtime) * time.Millisecond
		}
		<-tick.C
	}
	tb.Fatal("plain migration: no figures after completion")
	return 0, 0
}

// pauseWindow is the guest's pause as seen from outside: from the
// source's STOP event to the target's RESUME (QMP timestamps, one clock).
func pauseWindow(tb testing.TB, stop, resume *qmp.Subscription) time.Duration {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), migrationTimeout)
	defer cancel()
	s, err := stop.Wait(ctx, qmp.AnyOf("STOP"))
	if err != nil {
		tb.Fatalf("source STOP: %v", err)
	}
	r, err := resume.Wait(ctx, qmp.AnyOf("RESUME"))
	if err != nil {
		tb.Fatalf("target RESUME: %v", err)
	}
	return r.Timestamp.Sub(s.Timestamp)
}
