package migrationproxy

import (
	"errors"
	"fmt"
	"io"
)

// Channels: the migration streams a connection can carry, one unix socket
// each on both sides.
const (
	ChannelMain    = "main"    // QEMU's migration stream
	ChannelDisk    = "disk"    // the block mirror (NBD)
	ChannelControl = "control" // the launchers' own coordination
)

// Channels lists every channel, in a fixed order.
var Channels = []string{ChannelMain, ChannelDisk, ChannelControl}

// ValidChannel says whether c is one of Channels.
func ValidChannel(c string) bool {
	for _, k := range Channels {
		if c == k {
			return true
		}
	}
	return false
}

// The header a client sends after the TLS handshake, before any data:
//
//	magic   4 bytes  "KMIG"
//	version 1 byte   1
//	uidLen  1 byte   1..MaxUIDLen
//	uid     uidLen bytes, [a-z0-9-]
//	chanLen 1 byte   1..maxChannelLen
//	channel chanLen bytes, one of Channels
//
// The server answers with one status byte; StatusOK means that every byte
// that follows, both ways, is the channel's stream.
const (
	headerMagic   = "KMIG"
	headerVersion = 1
	// MaxUIDLen bounds a migration UID (a Kubernetes UID is 36).
	MaxUIDLen     = 64
	maxChannelLen = 16
	// MaxHeaderLen is the longest valid header.
	MaxHeaderLen = len(headerMagic) + 1 + 1 + MaxUIDLen + 1 + maxChannelLen
)

// Status is the server's one-byte answer to a header.
type Status byte

// Statuses. Anything but StatusOK is followed by the server closing the
// connection.
const (
	StatusOK               Status = 0
	StatusBadHeader        Status = 1
	StatusUnknownMigration Status = 2
	StatusUnknownChannel   Status = 3
	StatusUnavailable      Status = 4 // the local unix socket did not answer
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusBadHeader:
		return "bad header"
	case StatusUnknownMigration:
		return "unknown migration"
	case StatusUnknownChannel:
		return "unknown channel"
	case StatusUnavailable:
		return "target unavailable"
	}
	return fmt.Sprintf("status %d", byte(s))
}

// Header names the migration and channel of a connection.
type Header struct {
	UID     string
	Channel string
}

// errBadHeader marks a header that is malformed (as opposed to one naming
// an unknown migration).
var errBadHeader = errors.New("bad migration header")

// ValidateUID checks a migration UID: 1..MaxUIDLen bytes of [a-z0-9-].
func ValidateUID(uid string) error {
	if uid == "" || len(uid) > MaxUIDLen {
		return fmt.Errorf("%w: UID length %d not in 1..%d", errBadHeader, len(uid), MaxUIDLen)
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w: UID has byte %#x at %d, want [a-z0-9-]", errBadHeader, c, i)
		}
	}
	return nil
}

func (h Header) validate() error {
	if err := ValidateUID(h.UID); err != nil {
		return err
	}
	if !ValidChannel(h.Channel) {
		return fmt.Errorf("%w: unknown channel %q", errBadHeader, h.Channel)
	}
	return nil
}

// MarshalBinary encodes a valid header.
func (h Header) MarshalBinary() ([]byte, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, MaxHeaderLen)
	b = append(b, headerMagic...)
	b = append(b, headerVersion, byte(len(h.UID)))
	b = append(b, h.UID...)
	b = append(b, byte(len(h.Channel)))
	b = append(b, h.Channel...)
	return b, nil
}

// ReadHeader reads exactly one header from r, never more than
// MaxHeaderLen bytes and never a byte past the header, and validates it.
func ReadHeader(r io.Reader) (Header, error) {
	var fixed [len(headerMagic) + 2]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return Header{}, fmt.Errorf("read migration header: %w", err)
	}
	if string(fixed[:len(headerMagic)]) != headerMagic {
		return Header{}, fmt.Errorf("%w: magic %q", errBadHeader, fixed[:len(headerMagic)])
	}
	if v := fixed[len(headerMagic)]; v != headerVersion {
		return Header{}, fmt.Errorf("%w: version %d, want %d", errBadHeader, v, headerVersion)
	}
	uid, err := readField(r, int(fixed[len(headerMagic)+1]), MaxUIDLen, "UID")
	if err != nil {
		return Header{}, err
	}
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return Header{}, fmt.Errorf("read migration header: %w", err)
	}
	channel, err := readField(r, int(n[0]), maxChannelLen, "channel")
	if err != nil {
		return Header{}, err
	}
	h := Header{UID: uid, Channel: channel}
	return h, h.validate()
}

func readField(r io.Reader, n, limit int, what string) (string, error) {
	if n == 0 || n > limit {
		return "", fmt.Errorf("%w: %s length %d not in 1..%d", errBadHeader, what, n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("read migration header %s: %w", what, err)
	}
	return string(b), nil
}
