package testguest

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseMarker(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		ok     bool
		kind   string
		fields map[string]string
		args   []string
		raw    string
	}{
		{name: "no marker", line: "[    1.234] virtio_blk virtio1: [vda] 131072 512-byte logical blocks", ok: false},
		{name: "empty", line: "", ok: false},
		{name: "prefix only", line: "KEMU-GUEST", ok: false},
		{name: "prefix and spaces", line: "KEMU-GUEST   \r\n", ok: false},
		{name: "bad kind", line: "KEMU-GUEST Ready", ok: false},
		{name: "glued prefix", line: "KEMU-GUESTready", ok: false},
		{
			name: "ready", line: "KEMU-GUEST ready uptime=3.92 cpus=1 mem_kb=210740 hostname=kemu-testguest blocks=vda,vdb nics=-\r\n",
			ok: true, kind: "ready",
			fields: map[string]string{"uptime": "3.92", "cpus": "1", "mem_kb": "210740", "hostname": "kemu-testguest", "blocks": "vda,vdb", "nics": ""},
			raw:    "KEMU-GUEST ready uptime=3.92 cpus=1 mem_kb=210740 hostname=kemu-testguest blocks=vda,vdb nics=-",
		},
		{
			name: "kind only", line: "KEMU-GUEST ready", ok: true, kind: "ready", fields: map[string]string{}, raw: "KEMU-GUEST ready",
		},
		{
			name: "junk before prefix", line: "\x1b[2J\x1b[01;01HKEMU-GUEST tick n=7 uptime=11.31",
			ok: true, kind: "tick", fields: map[string]string{"n": "7", "uptime": "11.31"}, raw: "KEMU-GUEST tick n=7 uptime=11.31",
		},
		{
			name: "percent encoded", line: "KEMU-GUEST block name=vda size=68157440 serial=my%20disk%25 model=QEMU%20HARDDISK ro=0",
			ok: true, kind: "block",
			fields: map[string]string{"name": "vda", "size": "68157440", "serial": "my disk%", "model": "QEMU HARDDISK", "ro": "0"},
			raw:    "KEMU-GUEST block name=vda size=68157440 serial=my%20disk%25 model=QEMU%20HARDDISK ro=0",
		},
		{
			name: "literal dash", line: "KEMU-GUEST metadata instance-id=%2D local-hostname=-",
			ok: true, kind: "metadata", fields: map[string]string{"instance-id": "-", "local-hostname": ""},
			raw: "KEMU-GUEST metadata instance-id=%2D local-hostname=-",
		},
		{
			name: "base64 value keeps equals", line: "KEMU-GUEST userdata size=4 b64=YWJjCg== first=abc",
			ok: true, kind: "userdata", fields: map[string]string{"size": "4", "b64": "YWJjCg==", "first": "abc"},
			raw: "KEMU-GUEST userdata size=4 b64=YWJjCg== first=abc",
		},
		{
			name: "bare args and empty key", line: "KEMU-GUEST agent started =x port=/dev/vport0p1",
			ok: true, kind: "agent", fields: map[string]string{"port": "/dev/vport0p1"}, args: []string{"started"},
			raw: "KEMU-GUEST agent started =x port=/dev/vport0p1",
		},
		{
			name: "malformed escape kept", line: "KEMU-GUEST x v=%zz w=%4",
			ok: true, kind: "x", fields: map[string]string{"v": "%zz", "w": "%4"}, raw: "KEMU-GUEST x v=%zz w=%4",
		},
		{
			name: "hyphenated kind", line: "KEMU-GUEST block-removed name=vdb",
			ok: true, kind: "block-removed", fields: map[string]string{"name": "vdb"}, raw: "KEMU-GUEST block-removed name=vdb",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := ParseMarker(tc.line)
			if ok != tc.ok {
				t.Fatalf("ParseMarker(%q) ok = %v, want %v", tc.line, ok, tc.ok)
			}
			if !ok {
				return
			}
			if m.Kind != tc.kind {
				t.Errorf("Kind = %q, want %q", m.Kind, tc.kind)
			}
			if !reflect.DeepEqual(m.Fields, tc.fields) {
				t.Errorf("Fields = %#v, want %#v", m.Fields, tc.fields)
			}
			if !reflect.DeepEqual(m.Args, tc.args) {
				t.Errorf("Args = %#v, want %#v", m.Args, tc.args)
			}
			if m.Raw != tc.raw {
				t.Errorf("Raw = %q, want %q", m.Raw, tc.raw)
			}
		})
	}
}

func TestEncodeDecodeValue(t *testing.T) {
	tests := []struct{ in, enc string }{
		{"", "-"},
		{"-", "%2D"},
		{"vda", "vda"},
		{"a b", "a%20b"},
		{"x=y%", "x%3Dy%25"},
		{"#cloud-config", "%23cloud-config"},
		{"52:54:00:12:34:56", "52:54:00:12:34:56"},
		{"10.0.2.15/24", "10.0.2.15/24"},
		{"tab\tnl\n\xff", "tab%09nl%0A%FF"},
		{"ok._~:/@+,-", "ok._~:/@+,-"},
	}
	for _, tc := range tests {
		if got := EncodeValue(tc.in); got != tc.enc {
			t.Errorf("EncodeValue(%q) = %q, want %q", tc.in, got, tc.enc)
		}
		if got := DecodeValue(tc.enc); got != tc.in {
			t.Errorf("DecodeValue(%q) = %q, want %q", tc.enc, got, tc.in)
		}
	}
}

func TestMarkerAccessors(t *testing.T) {
	m, ok := ParseMarker("KEMU-GUEST block name=vda size=1048576 uptime=1.5 serial=-")
	if !ok {
		t.Fatal("not parsed")
	}
	if n, err := m.Int("size"); err != nil || n != 1048576 {
		t.Errorf("Int(size) = %d, %v", n, err)
	}
	if f, err := m.Float("uptime"); err != nil || f != 1.5 {
		t.Errorf("Float(uptime) = %v, %v", f, err)
	}
	if _, err := m.Int("missing"); err == nil {
		t.Error("Int(missing) did not fail")
	}
	if v, ok := m.Get("serial"); !ok || v != "" {
		t.Errorf("Get(serial) = %q, %v", v, ok)
	}
	if !IsKind("block", "name", "vda")(m) || IsKind("block", "name", "vdb")(m) || IsKind("cdrom")(m) {
		t.Error("IsKind mismatch")
	}
}

func TestWatcher(t *testing.T) {
	pr, pw := io.Pipe()
	var tee strings.Builder
	w := NewWatcher(pr, WithTee(&tee))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Written before anyone waits: found from the history.
	if _, err := io.WriteString(pw, "SeaBIOS (version 1.16)\r\nKEMU-GUEST boot proto=1\r\nKEMU-GUEST tick n=1\r\n"); err != nil {
		t.Fatal(err)
	}
	boot, err := w.WaitKind(ctx, KindBoot)
	if err != nil {
		t.Fatal(err)
	}
	if boot.Seq != 1 || boot.Field("proto") != "1" {
		t.Errorf("boot = %+v", boot)
	}
	tick1, err := w.WaitKind(ctx, KindTick)
	if err != nil || tick1.Field("n") != "1" {
		t.Fatalf("tick1 = %+v, %v", tick1, err)
	}

	// Waited for before it is written; the write comes from another goroutine.
	got := make(chan Marker, 1)
	errc := make(chan error, 1)
	go func() {
		m, err := w.WaitAfter(ctx, tick1.Seq, IsKind(KindTick))
		if err != nil {
			errc <- err
			return
		}
		got <- m
	}()
	// A partial line is not a marker until its newline arrives.
	if _, err := io.WriteString(pw, "KEMU-GUEST tick "); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(pw, "n=2\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Field("n") != "2" || m.Seq != 3 {
			t.Errorf("second tick = %+v", m)
		}
	case err := <-errc:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("timed out")
	}

	// A deadline that passes.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = w.WaitKind(short, KindPoweroff)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}

	// The console closes with a final unterminated marker, then waits fail fast.
	if _, err := io.WriteString(pw, "KEMU-GUEST poweroff source=acpi"); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	<-w.Done()
	if _, err := w.WaitKind(ctx, KindPoweroff, "source", "acpi"); err != nil {
		t.Errorf("final marker: %v", err)
	}
	if _, err := w.WaitKind(ctx, KindReady); !errors.Is(err, ErrClosed) {
		t.Errorf("err = %v, want ErrClosed", err)
	}
	if w.Err() != nil {
		t.Errorf("Err() = %v", w.Err())
	}
	if n := len(w.Markers()); n != 4 {
		t.Errorf("%d markers, want 4", n)
	}
	if n := len(w.Find(IsKind(KindTick))); n != 2 {
		t.Errorf("%d ticks, want 2", n)
	}
	if !strings.HasPrefix(w.Log(), "SeaBIOS (version 1.16)\n") || w.Log() != tee.String() {
		t.Errorf("Log() = %q, tee = %q", w.Log(), tee.String())
	}
	if tail := w.Tail(1); tail != "KEMU-GUEST poweroff source=acpi" {
		t.Errorf("Tail(1) = %q", tail)
	}
}

func TestPaths(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(OutEnv, dir)
	if _, err := Paths(); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("empty dir: err = %v, want ErrNotBuilt", err)
	}
	for _, f := range []string{
		"vmlinuz", "initrd.img", "disk.qcow2",
		"oci/containerdisk/index.json", "oci/kernelboot/index.json",
		"oci/containerdisk.oci.tar", "oci/kernelboot.oci.tar",
		"oci/containerdisk.docker.tar", "oci/kernelboot.docker.tar",
	} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Paths(); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("no manifest: err = %v, want ErrNotBuilt", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"markerProtocol": 1, "kernelVersion": "6.1.0-56-amd64"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := Paths()
	if err != nil {
		t.Fatal(err)
	}
	if a.Dir != dir || a.Disk != filepath.Join(dir, "disk.qcow2") || a.KernelVersion != "6.1.0-56-amd64" ||
		a.ContainerDiskOCI != filepath.Join(dir, "oci", "containerdisk") {
		t.Errorf("Paths() = %+v", a)
	}

	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "hack", "testguest", "build.sh")); err != nil {
		t.Errorf("RepoRoot() = %s: %v", root, err)
	}
	t.Setenv(OutEnv, "")
	if d, err := Dir(); err != nil || d != filepath.Join(root, "_out", "testguest") {
		t.Errorf("Dir() = %q, %v", d, err)
	}
}
