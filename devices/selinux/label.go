package selinux

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"

	goselinux "github.com/opencontainers/selinux/go-selinux"
)

// MaxCategories is the number of MCS categories of the usual targeted
// policy (c0–c1023).
const MaxCategories = 1024

var (
	// ErrExhausted is returned by Allocate when every category pair is in use.
	ErrExhausted = errors.New("selinux: every MCS category pair is in use")
	// ErrInUse is returned by Reserve for a pair that is already reserved.
	ErrInUse = errors.New("selinux: MCS category pair already in use")
)

// Label is one VM's pair of labels: Process for QEMU, File for its files.
// Both carry the same MCS level, e.g.
//
//	system_u:system_r:svirt_t:s0:c12,c345
//	system_u:object_r:svirt_image_t:s0:c12,c345
type Label struct {
	Process string
	File    string
}

// Level returns the MLS/MCS level shared by the labels ("s0:c12,c345"), or
// "" when the process label has none.
func (l Label) Level() string {
	c, err := goselinux.NewContext(l.Process)
	if err != nil {
		return ""
	}
	return c["level"]
}

// Config says which labels a Labeler hands out.
type Config struct {
	User        string // SELinux user of both labels, system_u
	ProcessRole string // system_r
	ProcessType string // svirt_t
	FileRole    string // object_r
	FileType    string // svirt_image_t
	Sensitivity string // s0
	// Categories is the size of the category range: pairs are drawn from
	// c0..c(Categories-1). 2..MaxCategories.
	Categories int
	// Rand is the source for category choice; nil uses math/rand/v2's
	// global source. Tests inject a seeded one.
	Rand *rand.Rand
	// ProcessRegistry also reserves every pair in go-selinux's process-wide
	// MCS registry (selinux.ReserveLabelV2/ReleaseLabel), so other users of
	// go-selinux in the same process (label.InitLabels, ContainerLabels)
	// never pick a VM's pair, and pairs they hold are skipped.
	ProcessRegistry bool
}

// DefaultConfig is sVirt's usual labelling: svirt_t / svirt_image_t over
// c0–c1023, sharing go-selinux's process-wide registry.
func DefaultConfig() Config {
	return Config{
		User:            "system_u",
		ProcessRole:     "system_r",
		ProcessType:     "svirt_t",
		FileRole:        "object_r",
		FileType:        "svirt_image_t",
		Sensitivity:     "s0",
		Categories:      MaxCategories,
		ProcessRegistry: true,
	}
}

func (c Config) validate() error {
	for name, v := range map[string]string{
		"user": c.User, "process role": c.ProcessRole, "process type": c.ProcessType,
		"file role": c.FileRole, "file type": c.FileType, "sensitivity": c.Sensitivity,
	} {
		if v == "" || strings.ContainsAny(v, ":, \t\n") {
			return fmt.Errorf("selinux: invalid %s %q", name, v)
		}
	}
	if c.Categories < 2 || c.Categories > MaxCategories {
		return fmt.Errorf("selinux: category range %d not in 2..%d", c.Categories, MaxCategories)
	}
	return nil
}

type pair struct{ c1, c2 int } // c1 < c2

// Labeler hands out MCS category pairs so that no two VMs on a node share
// one. It is safe for concurrent use.
type Labeler struct {
	cfg Config

	mu   sync.Mutex
	used map[pair]struct{}
}

// NewLabeler returns a Labeler for cfg with no pair in use.
func NewLabeler(cfg Config) (*Labeler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Labeler{cfg: cfg, used: map[pair]struct{}{}}, nil
}

// capacity is the number of distinct pairs c1 < c2.
func (l *Labeler) capacity() int { return l.cfg.Categories * (l.cfg.Categories - 1) / 2 }

// InUse returns the number of pairs reserved.
func (l *Labeler) InUse() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.used)
}

func (l *Labeler) intN(n int) int {
	if l.cfg.Rand != nil {
		return l.cfg.Rand.IntN(n)
	}
	return rand.IntN(n) //nolint:gosec // MCS pairs need uniqueness, not unpredictability
}

// Allocate reserves a fresh category pair for a new VM and returns its
// labels. Call Release when the VM ends.
func (l *Labeler) Allocate() (Label, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.used) >= l.capacity() {
		return Label{}, ErrExhausted
	}
	n := l.cfg.Categories
	// Random start, then a linear probe over the n×n grid (cells with
	// c1 >= c2 skipped): terminates even when nearly full.
	start := l.intN(n * n)
	for i := range n * n {
		cell := (start + i) % (n * n)
		p := pair{cell / n, cell % n}
		if p.c1 >= p.c2 {
			continue
		}
		if _, taken := l.used[p]; taken {
			continue
		}
		lab := l.label(p)
		if l.cfg.ProcessRegistry {
			if err := goselinux.ReserveLabelV2(lab.Process); err != nil {
				continue // held by another go-selinux user in this process
			}
		}
		l.used[p] = struct{}{}
		return lab, nil
	}
	return Label{}, ErrExhausted
}

// Reserve marks the pairs of already running VMs as in use, e.g. after a
// launcher or agent restart, so Allocate never hands them out again. Each
// entry is a process or file label (or a bare level "s0:c1,c2"). Every
// entry is tried; errors (malformed, out of range, or a pair already in
// use, ErrInUse) are joined.
func (l *Labeler) Reserve(existing ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, s := range existing {
		p, err := l.parse(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, taken := l.used[p]; taken {
			errs = append(errs, fmt.Errorf("%w: %q", ErrInUse, s))
			continue
		}
		if l.cfg.ProcessRegistry {
			if err := goselinux.ReserveLabelV2(l.label(p).Process); err != nil {
				errs = append(errs, fmt.Errorf("%w: %q: %w", ErrInUse, s, err))
				continue
			}
		}
		l.used[p] = struct{}{}
	}
	return errors.Join(errs...)
}

// Release frees the pair of a VM that has ended. Releasing a pair that is
// not reserved is a no-op; a malformed label is an error.
func (l *Labeler) Release(lab Label) error {
	p, err := l.parse(lab.Process)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, taken := l.used[p]; !taken {
		return nil
	}
	delete(l.used, p)
	if l.cfg.ProcessRegistry {
		goselinux.ReleaseLabel(l.label(p).Process)
	}
	return nil
}

// label formats the labels of pair p with go-selinux's Context.
func (l *Labeler) label(p pair) Label {
	level := fmt.Sprintf("%s:c%d,c%d", l.cfg.Sensitivity, p.c1, p.c2)
	proc, _ := goselinux.NewContext("")
	proc["user"], proc["role"], proc["type"], proc["level"] = l.cfg.User, l.cfg.ProcessRole, l.cfg.ProcessType, level
	file, _ := goselinux.NewContext("")
	file["user"], file["role"], file["type"], file["level"] = l.cfg.User, l.cfg.FileRole, l.cfg.FileType, level
	return Label{Process: proc.Get(), File: file.Get()}
}

// parse extracts the category pair of a label or bare level, checking it is
// in canonical form, in this Labeler's sensitivity and category range.
func (l *Labeler) parse(s string) (pair, error) {
	level := s
	if strings.Count(s, ":") >= 3 { // user:role:type:level
		c, err := goselinux.NewContext(s)
		if err != nil {
			return pair{}, fmt.Errorf("selinux: label %q: %w", s, err)
		}
		level = c["level"]
	}
	p, sens, err := parseLevel(level)
	if err != nil {
		return pair{}, fmt.Errorf("selinux: label %q: %w", s, err)
	}
	if sens != l.cfg.Sensitivity {
		return pair{}, fmt.Errorf("selinux: label %q: sensitivity %q, want %q", s, sens, l.cfg.Sensitivity)
	}
	if p.c2 >= l.cfg.Categories {
		return pair{}, fmt.Errorf("selinux: label %q: category c%d outside c0..c%d", s, p.c2, l.cfg.Categories-1)
	}
	return p, nil
}

// ParseLevel splits an sVirt level "s0:cA,cB" into its categories (A < B,
// both in c0..c1023, canonical decimal) and its sensitivity.
func ParseLevel(level string) (c1, c2 int, sensitivity string, err error) {
	p, sens, err := parseLevel(level)
	return p.c1, p.c2, sens, err
}

func parseLevel(level string) (pair, string, error) {
	sens, cats, ok := strings.Cut(level, ":")
	if !ok || sens == "" {
		return pair{}, "", fmt.Errorf("level %q has no categories", level)
	}
	a, b, ok := strings.Cut(cats, ",")
	if !ok {
		return pair{}, "", fmt.Errorf("level %q: want exactly two categories", level)
	}
	c1, err1 := parseCategory(a)
	c2, err2 := parseCategory(b)
	if err := errors.Join(err1, err2); err != nil {
		return pair{}, "", fmt.Errorf("level %q: %w", level, err)
	}
	if c1 >= c2 {
		return pair{}, "", fmt.Errorf("level %q: categories must be distinct and ascending", level)
	}
	return pair{c1, c2}, sens, nil
}

func parseCategory(s string) (int, error) {
	num, ok := strings.CutPrefix(s, "c")
	if !ok {
		return 0, fmt.Errorf("category %q: no c prefix", s)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= MaxCategories || strconv.Itoa(n) != num {
		return 0, fmt.Errorf("category %q not in c0..c%d", s, MaxCategories-1)
	}
	return n, nil
}
