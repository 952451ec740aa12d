package downwardmetrics

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sample() *Metrics {
	return &Metrics{Metrics: []Metric{
		stringMetric(ContextHost, "HostName", "node-1"),
		realMetric(ContextVM, "TotalCPUTime", "s", 12.5),
		uintMetric(ContextVM, "PhysicalMemoryAllocatedToVirtualSystem", "KiB", 131072),
	}}
}

// TestRoundTrip: a created disk is DiskSize bytes and holds an empty
// document; written metrics read back as they were, behind vhostmd's
// header (signature, flag clear, checksum and length of the body).
func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vhostmd0")
	if err := Create(path); err != nil {
		t.Fatal(err)
	}
	if err := Create(path); err == nil {
		t.Error("Create over an existing disk: no error")
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() != DiskSize {
		t.Fatalf("disk: %v, %v; want %d bytes", st, err, DiskSize)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if m, err := Read(f); err != nil || len(m.Metrics) != 0 {
		t.Fatalf("new disk: %+v, %v; want an empty document", m, err)
	}
	if err := Write(f, sample()); err != nil {
		t.Fatal(err)
	}
	got, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	want := sample()
	got.XMLName = want.XMLName
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v, want %+v", got, want)
	}
	raw, _ := os.ReadFile(path)
	var h Header
	if err := binary.Read(bytes.NewReader(raw), binary.BigEndian, &h); err != nil {
		t.Fatal(err)
	}
	body := raw[HeaderSize : HeaderSize+int(h.Length)]
	if string(h.Signature[:]) != "mvbd" || h.Busy != 0 || h.Checksum != Checksum(body) {
		t.Errorf("header %+v, body checksum %d", h, Checksum(body))
	}
	for _, s := range []string{`<metrics>`, `<metric type="string" context="host">`, `<name>HostName</name>`,
		`<metric type="real64" context="vm" unit="s">`, `<value>12.500000</value>`} {
		if !bytes.Contains(body, []byte(s)) {
			t.Errorf("body lacks %s:\n%s", s, body)
		}
	}
}

// TestTornWrite: a reader never takes a half-written body: while the busy
// flag is set it gets ErrBusy, and a body changed under a clear flag (a
// read racing the final header) fails the checksum.
func TestTornWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vhostmd0")
	if err := Create(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Write(f, sample()); err != nil {
		t.Fatal(err)
	}
	busy := Header{Signature: Signature, Busy: 1}
	if _, err := f.WriteAt(busy.bytes(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(f); !errors.Is(err, ErrBusy) {
		t.Errorf("busy disk: %v, want ErrBusy", err)
	}
	if err := Write(f, sample()); err != nil {
		t.Fatal(err)
	}
	// One byte of the body changes, as if the next body were half written.
	if _, err := f.WriteAt([]byte("X"), HeaderSize+20); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(f); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("torn body: %v, want a checksum error", err)
	}
	// Bad signature, bad length.
	for _, h := range []Header{{Signature: [4]byte{'x', 'x', 'x', 'x'}}, {Signature: Signature, Length: MaxBody + 1}, {Signature: Signature, Length: -1}} {
		if _, err := f.WriteAt(h.bytes(), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(f); err == nil {
			t.Errorf("header %+v: no error", h)
		}
	}
}

// TestEncodeBounded: a body over MaxBody is refused, not cut.
func TestEncodeBounded(t *testing.T) {
	m := &Metrics{Metrics: []Metric{stringMetric(ContextHost, "HostName", strings.Repeat("a", MaxBody))}}
	if _, err := Encode(m); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("oversized body: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCollect: KubeVirt's list, names, types and units, from a fixture
// /proc and /sys (two packages of two CPUs), in KubeVirt's order.
func TestCollect(t *testing.T) {
	root := t.TempDir()
	proc, sys := filepath.Join(root, "proc"), filepath.Join(root, "sys")
	writeFile(t, filepath.Join(proc, "stat"), "cpu  1000 200 300 5000 0 0 0 0 0 0\ncpu0 500 100 150 2500 0 0 0 0 0 0\n")
	writeFile(t, filepath.Join(proc, "meminfo"), "MemTotal: 8000 kB\nMemFree: 3000 kB\nBuffers: 500 kB\nCached: 1500 kB\n"+
		"SwapCached: 100 kB\nSwapTotal: 2000 kB\nSwapFree: 1800 kB\n")
	writeFile(t, filepath.Join(proc, "vmstat"), "pswpin 3\npswpout 5\n")
	for cpu, pkg := range []string{"0", "0", "1", "1"} {
		writeFile(t, filepath.Join(sys, "devices/system/cpu", "cpu"+string(rune('0'+cpu)), "topology/physical_package_id"), pkg+"\n")
	}
	h := Host{NodeName: "node-1", QEMUVersion: "7.2.0", Proc: proc, Sys: sys, Now: func() time.Time { return time.Unix(1700000000, 0) }}
	m, err := h.Collect(VM{CPUTime: 1500 * time.Millisecond, VCPUs: 2, MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	page := uint64(os.Getpagesize()) / 1024
	want := []string{
		"host HostName string  node-1", "host HostSystemInfo string  linux", "host VirtualizationVendor string  kemu.dev",
		"host VirtProductInfo string  7.2.0",
		"vm TotalCPUTime real64 s 1.500000", "vm ResourceProcessorLimit int64  2",
		"vm PhysicalMemoryAllocatedToVirtualSystem uint64 KiB 262144", "vm ResourceMemoryLimit uint64 KiB 262144",
		"host NumberOfPhysicalCPUs int64  2", "host TotalCPUTime real64 s 15.000000",
		"host FreePhysicalMemory uint64 KiB 3000", "host FreeVirtualMemory uint64 KiB 4800",
		"host MemoryAllocatedToVirtualServers uint64 KiB 3000", "host UsedVirtualMemory uint64 KiB 4900",
		"host PagedInMemory uint64 KiB " + itoa(3*page), "host PagedOutMemory uint64 KiB " + itoa(5*page),
		"host Time int64 s 1700000000",
	}
	var got []string
	for _, x := range m.Metrics {
		got = append(got, x.Context+" "+x.Name+" "+x.Type+" "+x.Unit+" "+x.Value)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("metrics:\n got  %q\n want %q", got, want)
	}

	// A figure that cannot be read is left out and said.
	if err := os.Remove(filepath.Join(proc, "vmstat")); err != nil {
		t.Fatal(err)
	}
	m, err = h.Collect(VM{})
	if err == nil || !strings.Contains(err.Error(), "vmstat") || len(m.Metrics) != len(want)-2 {
		t.Errorf("without vmstat: %d metrics, %v", len(m.Metrics), err)
	}
}

func itoa(v uint64) string { return uintMetric("", "", "", v).Value }

// TestCollectThisHost: the real /proc and /sys give every figure.
func TestCollectThisHost(t *testing.T) {
	m, err := Host{NodeName: "n"}.Collect(VM{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Metrics) != 17 {
		t.Errorf("%d metrics, want 17", len(m.Metrics))
	}
	if _, err := Encode(m); err != nil {
		t.Error(err)
	}
}
