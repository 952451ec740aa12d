// Package testguest locates the kemu test guest built by
// hack/testguest/build.sh and parses the markers its /init prints on the
// serial console.
//
// A marker is one line:
//
//	KEMU-GUEST <kind> key=value key=value ...
//
// Anything before the prefix on the same line (firmware escape sequences,
// a carriage return, a kernel message fragment) is ignored. Values never
// contain whitespace: bytes outside [A-Za-z0-9._~:/@+,-] are percent-encoded
// (%XX) by the guest, and "-" stands for an empty or absent value. Tokens
// without "=" are kept in Marker.Args. See hack/testguest/README.md.
package testguest

import (
	"fmt"
	"strconv"
	"strings"
)

// Prefix starts every marker.
const Prefix = "KEMU-GUEST"

// Protocol is the marker protocol version the guest reports in its "boot"
// marker (proto=1) and the one this package parses.
const Protocol = 1

// Marker kinds printed by the guest.
const (
	KindBoot           = "boot"
	KindModules        = "modules"
	KindBlock          = "block"
	KindBlockRemoved   = "block-removed"
	KindCDROM          = "cdrom"
	KindNIC            = "nic"
	KindNICRemoved     = "nic-removed"
	KindCIData         = "cidata"
	KindUserData       = "userdata"
	KindUserDataScript = "userdata-script"
	KindMetaData       = "metadata"
	KindNetworkConfig  = "networkconfig"
	KindVolume         = "volume"
	KindVolFile        = "volfile"
	KindFS             = "fs"
	KindFSFile         = "fsfile"
	KindAgent          = "agent"
	KindACPID          = "acpid"
	KindReady          = "ready"
	KindNet            = "net"
	KindTick           = "tick"
	KindPoweroff       = "poweroff"
	KindReboot         = "reboot"
	KindHalt           = "halt"
)

// Marker is one parsed marker line.
type Marker struct {
	// Seq numbers the markers a Watcher saw, from 1. Zero from ParseMarker.
	Seq int
	// Kind is the word after the prefix, e.g. "ready".
	Kind string
	// Fields holds the decoded key=value tokens; "-" decodes to "".
	Fields map[string]string
	// Args holds decoded tokens without "=", in order (none today).
	Args []string
	// Raw is the marker text from the prefix on, without the line end.
	Raw string
}

// Get returns a field and whether it was present.
func (m Marker) Get(key string) (string, bool) {
	v, ok := m.Fields[key]
	return v, ok
}

// Field returns a field's decoded value, "" if absent or "-".
func (m Marker) Field(key string) string { return m.Fields[key] }

// Int returns a field parsed as a base-10 integer.
func (m Marker) Int(key string) (int64, error) {
	v, ok := m.Fields[key]
	if !ok {
		return 0, fmt.Errorf("marker %q has no field %q", m.Raw, key)
	}
	return strconv.ParseInt(v, 10, 64)
}

// Float returns a field parsed as a float (e.g. uptime).
func (m Marker) Float(key string) (float64, error) {
	v, ok := m.Fields[key]
	if !ok {
		return 0, fmt.Errorf("marker %q has no field %q", m.Raw, key)
	}
	return strconv.ParseFloat(v, 64)
}

func (m Marker) String() string { return m.Raw }

// ParseMarker parses one console line. It reports false when the line holds
// no marker.
func ParseMarker(line string) (Marker, bool) {
	i := strings.Index(line, Prefix)
	if i < 0 {
		return Marker{}, false
	}
	raw := strings.TrimRight(line[i:], " \t\r\n\x00")
	tokens := strings.Fields(raw)
	if len(tokens) < 2 || tokens[0] != Prefix || !validKind(tokens[1]) {
		return Marker{}, false
	}
	m := Marker{Kind: tokens[1], Fields: map[string]string{}, Raw: raw}
	for _, tok := range tokens[2:] {
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			m.Args = append(m.Args, DecodeValue(tok))
			continue
		}
		if k == "" {
			continue
		}
		m.Fields[k] = DecodeValue(v)
	}
	return m, true
}

func validKind(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return s != ""
}

// DecodeValue undoes the guest's encoding: "-" is "", %XX is a byte.
// A malformed escape is kept as is.
func DecodeValue(v string) string {
	if v == "-" {
		return ""
	}
	if !strings.Contains(v, "%") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			if hi, ok1 := unhex(v[i+1]); ok1 {
				if lo, ok2 := unhex(v[i+2]); ok2 {
					b.WriteByte(hi<<4 | lo)
					i += 2
					continue
				}
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// EncodeValue encodes a value the way the guest does.
func EncodeValue(v string) string {
	if v == "" {
		return "-"
	}
	if v == "-" {
		return "%2D"
	}
	const hexdigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if safeByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
	return b.String()
}

func safeByte(c byte) bool {
	switch {
	case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("._~:/@+,-", c) >= 0
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Predicate selects markers for Watcher.Wait.
type Predicate func(Marker) bool

// IsKind matches markers of a kind whose fields equal the given key/value
// pairs (decoded values), e.g. IsKind("block", "serial", "disk1").
func IsKind(kind string, kv ...string) Predicate {
	if len(kv)%2 != 0 {
		panic("testguest.IsKind: odd number of key/value arguments")
	}
	return func(m Marker) bool {
		if m.Kind != kind {
			return false
		}
		for i := 0; i < len(kv); i += 2 {
			if v, ok := m.Fields[kv[i]]; !ok || v != kv[i+1] {
				return false
			}
		}
		return true
	}
}
