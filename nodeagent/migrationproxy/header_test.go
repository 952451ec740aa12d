package migrationproxy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, ch := range Channels {
		h := Header{UID: testUID, Channel: ch}
		b, err := h.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		r := bytes.NewReader(append(b, "stream"...))
		got, err := ReadHeader(r)
		if err != nil || got != h {
			t.Fatalf("ReadHeader = %+v, %v; want %+v", got, err, h)
		}
		if rest, _ := io.ReadAll(r); string(rest) != "stream" {
			t.Fatalf("ReadHeader consumed stream bytes: %q left", rest)
		}
	}
	if n := len(mustMarshal(t, Header{UID: strings.Repeat("a", MaxUIDLen), Channel: ChannelControl})); n > MaxHeaderLen {
		t.Fatalf("longest header %d > MaxHeaderLen %d", n, MaxHeaderLen)
	}
}

func mustMarshal(t *testing.T, h Header) []byte {
	t.Helper()
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHeaderRefused(t *testing.T) {
	good := mustMarshal(t, Header{UID: testUID, Channel: ChannelMain})
	frame := func(uid, ch string) []byte {
		b := append([]byte(headerMagic), headerVersion, byte(len(uid)))
		b = append(b, uid...)
		b = append(b, byte(len(ch)))
		return append(b, ch...)
	}
	tests := []struct {
		name string
		in   []byte
		bad  bool // errBadHeader (else a short read)
	}{
		{"bad magic", append([]byte("KMIX"), good[4:]...), true},
		{"bad version", append([]byte("KMIG\x00"), good[5:]...), true},
		{"empty UID", frame("", ChannelMain), true},
		{"UID too long", frame(strings.Repeat("a", MaxUIDLen+1), ChannelMain), true},
		{"UID upper case", frame("ABC", ChannelMain), true},
		{"UID with a NUL", frame("ab\x00c", ChannelMain), true},
		{"UID with a slash", frame("a/b", ChannelMain), true},
		{"UID with a dot", frame("..", ChannelMain), true},
		{"empty channel", frame(testUID, ""), true},
		{"unknown channel", frame(testUID, "Main"), true},
		{"channel too long", frame(testUID, strings.Repeat("c", maxChannelLen+1)), true},
		{"truncated", good[:len(good)-1], false},
		{"empty", nil, false},
	}
	for _, tt := range tests {
		_, err := ReadHeader(bytes.NewReader(tt.in))
		if err == nil {
			t.Errorf("%s: accepted", tt.name)
			continue
		}
		if errors.Is(err, errBadHeader) != tt.bad {
			t.Errorf("%s: err %v, bad header %v", tt.name, err, tt.bad)
		}
	}
	if _, err := (Header{UID: "ABC", Channel: ChannelMain}).MarshalBinary(); err == nil {
		t.Error("MarshalBinary of a bad UID succeeded")
	}
}

// ReadHeader never reads more than MaxHeaderLen bytes, whatever the peer
// sends.
func TestReadHeaderBounded(t *testing.T) {
	for _, in := range []string{
		"KMIG\x01\x40" + strings.Repeat("a", 64) + "\x10" + strings.Repeat("m", 16),
		"KMIG\x01\xff",
		"KMIG\x01\x01a\xff",
	} {
		r := &countingReader{r: io.MultiReader(strings.NewReader(in), bytes.NewReader(bytes.Repeat([]byte{0xff}, 1<<20)))}
		if _, err := ReadHeader(r); err == nil {
			t.Fatalf("%q accepted", in)
		}
		if r.n > MaxHeaderLen {
			t.Fatalf("%q: read %d bytes > %d", in, r.n, MaxHeaderLen)
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
