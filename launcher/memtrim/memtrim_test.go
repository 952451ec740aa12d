package memtrim

import (
	"os"
	"reflect"
	"testing"
)

const smaps = `00400000-00d61000 r-xp 00000000 fe:00 9986187                            /usr/bin/kemu-launcher
Size:               9604 kB
Rss:                7360 kB
Anonymous:             0 kB
00d61000-01721000 r--p 00961000 fe:00 9986187                            /usr/bin/kemu-launcher
Size:               9984 kB
Rss:                8192 kB
Anonymous:             0 kB
01721000-01798000 rw-p 01321000 fe:00 9986187                            /usr/bin/kemu-launcher
Rss:                 348 kB
Anonymous:           112 kB
01798000-037e5000 rw-p 00000000 00:00 0 
Rss:                 132 kB
Anonymous:           132 kB
7f0000000000-7f0000010000 r--p 00000000 fe:00 12 /usr/bin/kemu-launcher
Rss:                  64 kB
Anonymous:             8 kB
7f0000010000-7f0000020000 r--p 00000000 fe:00 13 /usr/lib/other.so
Rss:                  64 kB
Anonymous:             0 kB
7f0000020000-7f0000030000 r--s 00000000 fe:00 9986187 /usr/bin/kemu-launcher
Rss:                  64 kB
Anonymous:             0 kB
7f0000030000-7f0000040000 r-xp 00000000 fe:00 9986187 /usr/bin/kemu-launcher
Rss:                   0 kB
Anonymous:             0 kB
7ffc7aa50000-7ffc7aa71000 rw-p 00000000 00:00 0                          [stack]
Rss:                  16 kB
VmFlags: rd wr mr mw me gd ac
`

func TestDroppable(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		want       []Mapping
	}{
		{
			// Text and rodata: read-only, private, no private copy. Not
			// the data (writable), a relocated read-only segment
			// (anonymous pages), a shared mapping, or nothing resident.
			name: "executable", path: "/usr/bin/kemu-launcher",
			want: []Mapping{{0x400000, 0xd61000, 7360 << 10}, {0xd61000, 0x1721000, 8192 << 10}},
		},
		{name: "another file", path: "/usr/lib/other.so", want: []Mapping{{0x7f0000010000, 0x7f0000020000, 64 << 10}}},
		{name: "no such file", path: "/nowhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Droppable([]byte(smaps), tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Droppable = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDroppableBadLine(t *testing.T) {
	bad := "00400000-00d61000 r-xp 00000000 fe:00 1 /x\nRss: many kB\n"
	if _, err := Droppable([]byte(bad), "/x"); err == nil {
		t.Error("a bad Rss line was accepted")
	}
}

// Release in this very process: the test binary's read-only mappings lose
// their resident pages, and its code runs on (the pages come back).
func TestRelease(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	resident := func() int64 {
		b, err := os.ReadFile("/proc/self/smaps")
		if err != nil {
			t.Fatal(err)
		}
		maps, err := Droppable(b, exe)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, m := range maps {
			n += m.RSS
		}
		return n
	}
	before := resident()
	r, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := resident() // the code that reads smaps runs again, from the page cache
	if len(r.Mappings) == 0 || r.FileBytes <= 0 {
		t.Fatalf("nothing released: %+v (resident before: %d bytes)", r, before)
	}
	if after >= r.FileBytes {
		t.Errorf("the executable's read-only mappings hold %d bytes after releasing %d", after, r.FileBytes)
	}
	t.Logf("released %d bytes of %d mappings; resident after: %d bytes", r.FileBytes, len(r.Mappings), after)
}
