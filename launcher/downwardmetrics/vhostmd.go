// Package downwardmetrics writes KubeVirt's downward metrics: the host's
// and this VM's figures as vhostmd's metrics XML, in vhostmd's disk format
// (a raw disk the guest reads with vm-dump-metrics).
//
// The disk (KubeVirt's vhostmd0, DiskSize bytes) starts with a 16-byte
// big-endian header — the signature "mvbd", a busy flag, the checksum
// (the sum of the body's bytes as an int32) and the body's length — and
// the XML body follows it. A writer sets the busy flag before it touches
// the body and clears it, with the new checksum and length, after: a
// reader that finds the flag set, or a checksum that does not match the
// body (it read in the middle of an update), reads again. That is
// vhostmd's protocol and KubeVirt's writer's.
package downwardmetrics

import (
	"bytes"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
)

// DiskSize is the size of the metrics disk: 256 KiB, KubeVirt's.
const DiskSize = 256 << 10

// HeaderSize is the vhostmd header's size: signature, busy flag,
// checksum, length (4 bytes each).
const HeaderSize = 16

// MaxBody is the largest XML body a disk holds: KubeVirt's bound
// (DiskSize less 24 bytes).
const MaxBody = DiskSize - 24

// Signature opens every vhostmd disk.
var Signature = [4]byte{'m', 'v', 'b', 'd'}

// ErrBusy says the disk was being written when it was read: read again.
var ErrBusy = errors.New("vhostmd disk busy (being written)")

// Header is the vhostmd disk header, big-endian on disk.
type Header struct {
	Signature [4]byte
	Busy      int32
	Checksum  int32
	Length    int32
}

// Checksum is vhostmd's checksum: the sum of the body's bytes.
func Checksum(body []byte) int32 {
	var sum int32
	for _, b := range body {
		sum += int32(b)
	}
	return sum
}

// Metrics is vhostmd's metrics document.
type Metrics struct {
	XMLName xml.Name `xml:"metrics"`
	Metrics []Metric `xml:"metric"`
}

// Metric is one figure: its type (int64, uint64, real64, string, ...),
// context (host or vm), name, value and unit.
type Metric struct {
	Type    string `xml:"type,attr"`
	Context string `xml:"context,attr"`
	Unit    string `xml:"unit,attr,omitempty"`
	Name    string `xml:"name"`
	Value   string `xml:"value"`
}

// Contexts of a metric.
const (
	ContextHost = "host"
	ContextVM   = "vm"
)

// Encode renders m as the disk's body (indented XML and a newline, as
// KubeVirt's); an error when it is over MaxBody.
func Encode(m *Metrics) ([]byte, error) {
	body, err := xml.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("downwardmetrics: encode: %w", err)
	}
	body = append(body, '\n')
	if len(body) > MaxBody {
		return nil, fmt.Errorf("downwardmetrics: metrics body is %d bytes, at most %d fit", len(body), MaxBody)
	}
	return body, nil
}

func (h Header) bytes() []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, h) // a fixed-size struct into a buffer
	return b.Bytes()
}

// Write puts m on the disk f: the busy header, the body, then the header
// with the body's checksum and length and the flag cleared. Between the
// steps f is synced, so the busy flag is on the disk before any byte of the
// new body is.
func Write(f *os.File, m *Metrics) error {
	body, err := Encode(m)
	if err != nil {
		return err
	}
	h := Header{Signature: Signature, Busy: 1}
	if _, err := f.WriteAt(h.bytes(), 0); err != nil {
		return fmt.Errorf("downwardmetrics: mark %s busy: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("downwardmetrics: sync %s: %w", f.Name(), err)
	}
	if _, err := f.WriteAt(body, HeaderSize); err != nil {
		return fmt.Errorf("downwardmetrics: write %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("downwardmetrics: sync %s: %w", f.Name(), err)
	}
	h = Header{Signature: Signature, Checksum: Checksum(body), Length: int32(len(body))}
	if _, err := f.WriteAt(h.bytes(), 0); err != nil {
		return fmt.Errorf("downwardmetrics: unmark %s: %w", f.Name(), err)
	}
	return nil
}

// Create makes the disk at path (DiskSize bytes, mode 0644: QEMU opens it
// read-only) holding an empty metrics document, as KubeVirt's launcher
// does before the domain starts.
func Create(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("downwardmetrics: %w", err)
	}
	err = f.Truncate(DiskSize)
	if err == nil {
		err = Write(f, &Metrics{})
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("downwardmetrics: create %s: %w", path, err)
	}
	return nil
}

// Read parses a disk as the guest's vm-dump-metrics does: ErrBusy while it
// is written, an error for a bad signature, length or checksum (a torn
// read: read again).
func Read(r io.ReaderAt) (*Metrics, error) {
	hb := make([]byte, HeaderSize)
	if _, err := r.ReadAt(hb, 0); err != nil {
		return nil, fmt.Errorf("downwardmetrics: read header: %w", err)
	}
	var h Header
	if err := binary.Read(bytes.NewReader(hb), binary.BigEndian, &h); err != nil {
		return nil, fmt.Errorf("downwardmetrics: header: %w", err)
	}
	switch {
	case h.Signature != Signature:
		return nil, fmt.Errorf("downwardmetrics: signature %q, not %q", h.Signature[:], Signature[:])
	case h.Busy != 0:
		return nil, ErrBusy
	case h.Length < 0 || h.Length > MaxBody:
		return nil, fmt.Errorf("downwardmetrics: body length %d out of range 0-%d", h.Length, MaxBody)
	}
	body := make([]byte, h.Length)
	if _, err := r.ReadAt(body, HeaderSize); err != nil {
		return nil, fmt.Errorf("downwardmetrics: read body: %w", err)
	}
	if sum := Checksum(body); sum != h.Checksum {
		return nil, fmt.Errorf("downwardmetrics: checksum %d, header says %d (read during an update?)", sum, h.Checksum)
	}
	var m Metrics
	if err := xml.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("downwardmetrics: parse: %w", err)
	}
	return &m, nil
}
