package procmem

import (
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	const rollup = `00400000-7ffea548b000 ---p 00000000 00:00 0                          [rollup]
Rss:               20732 kB
Pss:               20726 kB
Pss_Dirty:         20724 kB
Pss_Anon:           4936 kB
Anonymous:          4936 kB
`
	u, err := Parse([]byte(rollup))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Usage{RSS: 20732 << 10, PSS: 20726 << 10, Anon: 4936 << 10, File: (20732 - 4936) << 10}); u != want {
		t.Errorf("Parse = %+v, want %+v", u, want)
	}
	if _, err := Parse([]byte("Rss: 1 kB\n")); err == nil {
		t.Error("a rollup without Pss and Anonymous was accepted")
	}
}

func TestReadSelf(t *testing.T) {
	u, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS <= 0 || u.PSS <= 0 || u.Anon <= 0 || u.Anon > u.RSS {
		t.Errorf("this process: %+v", u)
	}
}
