package cmdline

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      string
	}{
		{in: "", want: ""},
		{in: "plain", want: "plain"},
		{in: "a,b", want: "a,,b"},
		{in: ",", want: ",,"},
		{in: ",,", want: ",,,,"},
		{in: "a,,b,", want: "a,,,,b,,"},
		{in: "/var/lib/kemu/vol,1/disk.img", want: "/var/lib/kemu/vol,,1/disk.img"},
		{in: "key=value", want: "key=value"}, // '=' needs no escaping in a value
		{in: "spaces are fine", want: "spaces are fine"},
		{in: "ünïcödé", want: "ünïcödé"},
		{in: "a\nb", err: "control character (U+000A)"},
		{in: "a\rb", err: "control character (U+000D)"},
		{in: "a\x00b", err: "control character (U+0000)"},
		{in: "tab\there", err: "control character (U+0009)"},
		{in: "del\x7f", err: "control character (U+007F)"},
		{in: "bad\xffutf8", err: "not valid UTF-8"},
	} {
		got, err := Escape(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Escape(%q) error = %v, want one containing %q", tc.in, err, tc.err)
			}
		case err != nil:
			t.Errorf("Escape(%q): %v", tc.in, err)
		case got != tc.want:
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// splitOptions splits an option list the way QEMU's parsers do: a single
// comma separates, a doubled comma is a literal comma.
func splitOptions(s string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			if i+1 < len(s) && s[i+1] == ',' {
				cur.WriteByte(',')
				i++
				continue
			}
			parts = append(parts, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(s[i])
	}
	return append(parts, cur.String())
}

func TestOptsRoundTrip(t *testing.T) {
	s, err := newOpts("drv").add("path", "/a,b/c").add("serial", ",x,,").addInt("n", 3).String()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"drv", "path=/a,b/c", "serial=,x,,", "n=3"}
	if got := splitOptions(s); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("split(%q) = %q, want %q", s, got, want)
	}
	if _, err := newOpts("drv").add("serial", "x\ny").String(); err == nil || !strings.Contains(err.Error(), "option serial") {
		t.Errorf("error = %v, want one naming option serial", err)
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a", ",", "a,b", ",,,", "a\nb", "\xff", "x=y,z=w", "ü,ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		e, err := Escape(v)
		if err != nil {
			if CheckArg(v) == nil {
				t.Fatalf("Escape(%q) failed but CheckArg accepts it: %v", v, err)
			}
			return
		}
		if !utf8.ValidString(v) {
			t.Fatalf("Escape accepted invalid UTF-8 %q", v)
		}
		// The escaped value is one piece, and reads back as v.
		parts := splitOptions(e)
		if len(parts) != 1 || parts[0] != v {
			t.Fatalf("Escape(%q) = %q splits into %q", v, e, parts)
		}
		// Also as a value in a list, between other options.
		parts = splitOptions("drv,k=" + e + ",z=1")
		if len(parts) != 3 || parts[1] != "k="+v {
			t.Fatalf("option list with %q splits into %q", e, parts)
		}
	})
}
