package selinux

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"

	goselinux "github.com/opencontainers/selinux/go-selinux"
)

// testConfig is DefaultConfig with a seeded source and a private registry,
// so tests neither share go-selinux's global state nor depend on chance.
func testConfig(seed uint64) Config {
	cfg := DefaultConfig()
	cfg.Rand = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cfg.ProcessRegistry = false
	return cfg
}

func newLabeler(t *testing.T, cfg Config) *Labeler {
	t.Helper()
	l, err := NewLabeler(cfg)
	if err != nil {
		t.Fatalf("NewLabeler: %v", err)
	}
	return l
}

var (
	procRE = regexp.MustCompile(`^system_u:system_r:svirt_t:s0:c(\d+),c(\d+)$`)
	fileRE = regexp.MustCompile(`^system_u:object_r:svirt_image_t:s0:c(\d+),c(\d+)$`)
)

// checkLabel verifies one allocated label: format, go-selinux parsing,
// range, distinct ascending categories, same level on process and file.
func checkLabel(t *testing.T, lab Label) (c1, c2 int) {
	t.Helper()
	m := procRE.FindStringSubmatch(lab.Process)
	if m == nil {
		t.Fatalf("process label %q has the wrong form", lab.Process)
	}
	if !fileRE.MatchString(lab.File) {
		t.Fatalf("file label %q has the wrong form", lab.File)
	}
	for _, s := range []string{lab.Process, lab.File} {
		ctx, err := goselinux.NewContext(s)
		if err != nil {
			t.Fatalf("go-selinux cannot parse %q: %v", s, err)
		}
		if ctx.Get() != s {
			t.Fatalf("go-selinux round trip of %q gives %q", s, ctx.Get())
		}
		if ctx["user"] != "system_u" || ctx["level"] != lab.Level() {
			t.Fatalf("label %q: user %q level %q, want system_u %q", s, ctx["user"], ctx["level"], lab.Level())
		}
	}
	c1, c2, sens, err := ParseLevel(lab.Level())
	if err != nil {
		t.Fatalf("ParseLevel(%q): %v", lab.Level(), err)
	}
	if sens != "s0" || c1 < 0 || c2 > 1023 || c1 >= c2 {
		t.Fatalf("level %q: sensitivity %q categories c%d,c%d", lab.Level(), sens, c1, c2)
	}
	if m[1] != fmt.Sprint(c1) || m[2] != fmt.Sprint(c2) {
		t.Fatalf("regexp and ParseLevel disagree on %q", lab.Process)
	}
	return c1, c2
}

func TestAllocateFormat(t *testing.T) {
	l := newLabeler(t, testConfig(1))
	for range 50 {
		lab, err := l.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		checkLabel(t, lab)
	}
}

func TestAllocateUnique500(t *testing.T) {
	l := newLabeler(t, testConfig(2))
	seen := map[string]bool{}
	c1s, c2s := map[int]bool{}, map[int]bool{}
	for range 500 {
		lab, err := l.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		c1, c2 := checkLabel(t, lab)
		if seen[lab.Level()] {
			t.Fatalf("level %s handed out twice", lab.Level())
		}
		seen[lab.Level()] = true
		c1s[c1], c2s[c2] = true, true
	}
	if l.InUse() != 500 {
		t.Fatalf("InUse = %d, want 500", l.InUse())
	}
	// Spread over the range, not clustered by the probe.
	if len(c1s) < 200 || len(c2s) < 200 {
		t.Fatalf("poor spread: %d distinct c1, %d distinct c2", len(c1s), len(c2s))
	}
}

func TestDeterministicWithSeed(t *testing.T) {
	seq := func(seed uint64) []string {
		l := newLabeler(t, testConfig(seed))
		var out []string
		for range 20 {
			lab, err := l.Allocate()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, lab.Process)
		}
		return out
	}
	a, b, c := seq(7), seq(7), seq(8)
	if strings.Join(a, " ") != strings.Join(b, " ") {
		t.Fatalf("same seed, different labels:\n%v\n%v", a, b)
	}
	if strings.Join(a, " ") == strings.Join(c, " ") {
		t.Fatalf("different seeds, same labels: %v", a)
	}
}

func TestExhaustReleaseReuse(t *testing.T) {
	cfg := testConfig(3)
	cfg.Categories = 3 // pairs: c0,c1 c0,c2 c1,c2
	l := newLabeler(t, cfg)
	var got []Label
	for range 3 {
		lab, err := l.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, lab)
	}
	levels := map[string]bool{}
	for _, lab := range got {
		levels[lab.Level()] = true
	}
	if len(levels) != 3 || !levels["s0:c0,c1"] || !levels["s0:c0,c2"] || !levels["s0:c1,c2"] {
		t.Fatalf("3 categories should give the 3 pairs, got %v", levels)
	}
	if _, err := l.Allocate(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("4th Allocate: %v, want ErrExhausted", err)
	}
	if err := l.Release(got[1]); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(got[1]); err != nil { // idempotent
		t.Fatalf("second Release: %v", err)
	}
	if l.InUse() != 2 {
		t.Fatalf("InUse = %d, want 2", l.InUse())
	}
	lab, err := l.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	if lab != got[1] {
		t.Fatalf("after release got %v, want the released %v", lab, got[1])
	}
	if err := l.Release(Label{Process: "garbage"}); err == nil {
		t.Fatal("Release of a malformed label succeeded")
	}
}

func TestReserveExistingPreventsCollision(t *testing.T) {
	// What a fresh Labeler with seed 4 would hand out first...
	first, err := newLabeler(t, testConfig(4)).Allocate()
	if err != nil {
		t.Fatal(err)
	}
	// ...is not handed out once a running VM holds it (agent restart).
	l := newLabeler(t, testConfig(4))
	if err := l.Reserve(first.Process); err != nil {
		t.Fatal(err)
	}
	for range 300 {
		lab, err := l.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		if lab.Level() == first.Level() {
			t.Fatalf("Allocate handed out the reserved %s", first.Level())
		}
	}
	// Reserving a pair in use is an error (two VMs would share it).
	if err := l.Reserve(first.File); !errors.Is(err, ErrInUse) {
		t.Fatalf("Reserve of a pair in use: %v, want ErrInUse", err)
	}
}

func TestReserveForms(t *testing.T) {
	cfg := testConfig(5)
	cfg.Categories = 4
	l := newLabeler(t, cfg)
	err := l.Reserve(
		"system_u:system_r:svirt_t:s0:c0,c1",       // process label
		"system_u:object_r:svirt_image_t:s0:c0,c2", // file label
		"s0:c1,c2",                           // bare level
		"s0:c2,c3",                           // ok
		"s0:c1,c9",                           // out of this range
		"s1:c0,c3",                           // wrong sensitivity
		"system_u:system_r:svirt_t:s0",       // no categories
		"system_u:system_r:svirt_t:s0:c3,c3", // equal
		"s0:c0,c1",                           // in use
	)
	if err == nil {
		t.Fatal("Reserve accepted bad entries")
	}
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("Reserve error %v does not wrap ErrInUse", err)
	}
	for _, bad := range []string{"c9", "s1", "no categories", "c3,c3"} {
		if !strings.Contains(err.Error(), bad) {
			t.Errorf("error does not mention %q: %v", bad, err)
		}
	}
	if l.InUse() != 4 {
		t.Fatalf("InUse = %d, want the 4 good entries", l.InUse())
	}
	lab, err := l.Allocate() // only c0,c3 and c1,c3 remain
	if err != nil {
		t.Fatal(err)
	}
	if lv := lab.Level(); lv != "s0:c0,c3" && lv != "s0:c1,c3" {
		t.Fatalf("Allocate gave %s, a reserved pair", lv)
	}
}

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in     string
		c1, c2 int
		ok     bool
	}{
		{"s0:c12,c345", 12, 345, true},
		{"s0:c0,c1023", 0, 1023, true},
		{"s0:c0,c1024", 0, 0, false},
		{"s0:c345,c12", 0, 0, false}, // not canonical
		{"s0:c5,c5", 0, 0, false},
		{"s0:c012,c345", 0, 0, false},
		{"s0:c-1,c3", 0, 0, false},
		{"s0:c1", 0, 0, false},
		{"s0:c1,c2,c3", 0, 0, false},
		{"s0:c1.c2", 0, 0, false},
		{"s0", 0, 0, false},
		{":c1,c2", 0, 0, false},
		{"s0:1,2", 0, 0, false},
	} {
		c1, c2, sens, err := ParseLevel(tc.in)
		if tc.ok != (err == nil) {
			t.Errorf("ParseLevel(%q) err = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && (c1 != tc.c1 || c2 != tc.c2 || sens != "s0") {
			t.Errorf("ParseLevel(%q) = %d %d %q", tc.in, c1, c2, sens)
		}
	}
}

func TestConfig(t *testing.T) {
	cfg := testConfig(6)
	cfg.ProcessType, cfg.FileType = "container_t", "container_file_t"
	l := newLabeler(t, cfg)
	lab, err := l.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(lab.Process, "system_u:system_r:container_t:s0:c") ||
		!strings.HasPrefix(lab.File, "system_u:object_r:container_file_t:s0:c") {
		t.Fatalf("configured types not used: %+v", lab)
	}
	for name, mut := range map[string]func(*Config){
		"empty type":     func(c *Config) { c.ProcessType = "" },
		"colon in role":  func(c *Config) { c.FileRole = "object_r:x" },
		"one category":   func(c *Config) { c.Categories = 1 },
		"too many":       func(c *Config) { c.Categories = MaxCategories + 1 },
		"no sensitivity": func(c *Config) { c.Sensitivity = "" },
	} {
		c := DefaultConfig()
		mut(&c)
		if _, err := NewLabeler(c); err == nil {
			t.Errorf("%s: NewLabeler accepted %+v", name, c)
		}
	}
}

func TestConcurrentAllocate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ProcessRegistry = false // global math/rand source, concurrent use
	l := newLabeler(t, cfg)
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for range 100 {
				lab, err := l.Allocate()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[lab.Level()] {
					t.Errorf("duplicate %s", lab.Level())
				}
				seen[lab.Level()] = true
				release := len(seen)%3 == 0
				if release { // forget it before another goroutine may get it
					delete(seen, lab.Level())
				}
				mu.Unlock()
				if release {
					if err := l.Release(lab); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestProcessRegistry checks the Labeler shares go-selinux's process-wide
// MCS registry: pairs held there are skipped, ours are visible there, and
// Release frees them. This bookkeeping works without an SELinux kernel.
func TestProcessRegistry(t *testing.T) {
	cfg := testConfig(9)
	cfg.Categories = 3
	cfg.ProcessRegistry = true
	l := newLabeler(t, cfg)
	held := []string{"system_u:system_r:container_t:s0:c0,c1", "system_u:system_r:container_t:s0:c1,c2"}
	for _, h := range held {
		if err := goselinux.ReserveLabelV2(h); err != nil {
			t.Fatalf("go-selinux reserve %s: %v", h, err)
		}
		t.Cleanup(func() { goselinux.ReleaseLabel(h) })
	}
	lab, err := l.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	if lab.Level() != "s0:c0,c2" {
		t.Fatalf("Allocate gave %s, want the only pair go-selinux does not hold", lab.Level())
	}
	if err := goselinux.CheckLabel(lab.Process); !errors.Is(err, goselinux.ErrMCSAlreadyExists) {
		t.Fatalf("go-selinux does not see our pair: %v", err)
	}
	if _, err := l.Allocate(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Allocate: %v, want ErrExhausted", err)
	}
	if err := l.Reserve(held[0]); !errors.Is(err, ErrInUse) {
		t.Fatalf("Reserve of a pair go-selinux holds: %v, want ErrInUse", err)
	}
	if err := l.Release(lab); err != nil {
		t.Fatal(err)
	}
	if err := goselinux.CheckLabel(lab.Process); err != nil {
		t.Fatalf("Release did not free the pair in go-selinux: %v", err)
	}
}
