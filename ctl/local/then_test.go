package local

import (
	"slices"
	"testing"
)

func TestThenValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"one", []string{"pause"}, []string{"pause"}},
		{"comma list", []string{"pause,unpause,sleep=2s"}, []string{"pause", "unpause", "sleep=2s"}},
		{"repeated", []string{"pause", "agent"}, []string{"pause", "agent"}},
		{"exec takes the rest", []string{`pause,exec=printf "a,b\n",x`}, []string{"pause", `exec=printf "a,b\n",x`}},
		{"exec, quotes as is", []string{`exec=echo "hi" 'there'`}, []string{`exec=echo "hi" 'there'`}},
		{"copy takes the rest", []string{"copy-in=a,b.txt:/tmp/a,b"}, []string{"copy-in=a,b.txt:/tmp/a,b"}},
		{"then more", []string{"exec=true", "copy-out=o:/etc/os-release", "shutdown"}, []string{"exec=true", "copy-out=o:/etc/os-release", "shutdown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			v := thenValue{&got}
			for _, a := range tc.args {
				if err := v.Set(a); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCopyPaths(t *testing.T) {
	for _, tc := range []struct{ val, host, guest string }{
		{"data/x.bin:/tmp/x.bin", "data/x.bin", "/tmp/x.bin"},
		{"x:/tmp/a:b", "x", "/tmp/a:b"}, // the first colon splits: the host path has none
		{"out/a:b:/tmp/a", "", ""},      // guest path "b:/tmp/a" is not absolute
	} {
		host, guest, err := copyPaths("copy-in", tc.val)
		if tc.host == "" {
			if err == nil {
				t.Errorf("%s: accepted as %q %q", tc.val, host, guest)
			}
			continue
		}
		if err != nil || host != tc.host || guest != tc.guest {
			t.Errorf("%s: %q %q %v", tc.val, host, guest, err)
		}
	}
}

func TestEndsWithCheckShutdown(t *testing.T) {
	for _, tc := range []struct {
		then []string
		want bool
	}{
		{nil, false},
		{[]string{"pause", "unpause"}, false},
		{[]string{"exec=true"}, true},
		{[]string{"copy-in=a:/a", "pause"}, true},
		{[]string{"exec=true", "shutdown"}, false},
		{[]string{"exec=true", "stop"}, false},
		{[]string{"exec=true", "shutdown", "sleep=1s"}, true},
	} {
		if got := endsWithCheckShutdown(tc.then); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.then, got, tc.want)
		}
	}
}
