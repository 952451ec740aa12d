package cgroup

import (
	"fmt"
	"math"
	"strings"

	"golang.org/x/sys/unix"
)

// Device types of a Rule.
const (
	Char  = 'c'
	Block = 'b'
	All   = 'a' // char and block
)

// Any matches any major or minor number.
const Any = -1

// Rule allows access to devices of one type and major:minor (either may be Any).
type Rule struct {
	Type   byte   // Char, Block or All
	Major  int64  // or Any
	Minor  int64  // or Any
	Access string // a non-empty subset of "rwm": read, write, mknod
}

// String is the cgroup v1 devices.allow form, e.g. "c 1:3 rwm", "c 136:* rwm".
func (r Rule) String() string {
	num := func(n int64) string {
		if n == Any {
			return "*"
		}
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%c %s:%s %s", r.Type, num(r.Major), num(r.Minor), r.Access)
}

func (r Rule) validate() error {
	switch r.Type {
	case Char, Block, All:
	default:
		return fmt.Errorf("device rule %v: type must be c, b or a", r)
	}
	for _, n := range []int64{r.Major, r.Minor} {
		if n != Any && (n < 0 || n > math.MaxInt32) {
			return fmt.Errorf("device rule %v: number %d out of range", r, n)
		}
	}
	if r.Access == "" || strings.Trim(r.Access, "rwm") != "" {
		return fmt.Errorf("device rule %v: access must be a non-empty subset of rwm", r)
	}
	return nil
}

// Allowlist is the complete set of devices a cgroup may use; a device not matched
// by any rule is denied (EPERM). A request is allowed when one rule matches its
// type and numbers and grants every access the request asks for.
type Allowlist []Rule

// Validate checks every rule.
func (a Allowlist) Validate() error {
	for _, r := range a {
		if err := r.validate(); err != nil {
			return err
		}
	}
	return nil
}

// Strings renders the list in cgroup v1 form (for logs and conditions).
func (a Allowlist) Strings() []string {
	out := make([]string, len(a))
	for i, r := range a {
		out[i] = r.String()
	}
	return out
}

// Well-known device numbers.
var (
	Null     = Rule{Char, 1, 3, "rwm"}
	Zero     = Rule{Char, 1, 5, "rwm"}
	Full     = Rule{Char, 1, 7, "rwm"}
	Random   = Rule{Char, 1, 8, "rwm"}
	URandom  = Rule{Char, 1, 9, "rwm"}
	TTY      = Rule{Char, 5, 0, "rwm"}
	PTMX     = Rule{Char, 5, 2, "rwm"}
	PTS      = Rule{Char, 136, Any, "rwm"}
	KVM      = Rule{Char, 10, 232, "rwm"}
	TUN      = Rule{Char, 10, 200, "rwm"}
	VhostNet = Rule{Char, 10, 238, "rwm"}
)

// Default is what QEMU needs: null, zero, full, random, urandom, tty, ptmx and
// pts; /dev/kvm when kvm, /dev/net/tun when tun, /dev/vhost-net when vhostNet;
// and the given block devices (paths of block-mode volumes, read with stat),
// read-write.
func Default(kvm, tun, vhostNet bool, blockDevices ...string) (Allowlist, error) {
	a := Allowlist{Null, Zero, Full, Random, URandom, TTY, PTMX, PTS}
	if kvm {
		a = append(a, KVM)
	}
	if tun {
		a = append(a, TUN)
	}
	if vhostNet {
		a = append(a, VhostNet)
	}
	for _, p := range blockDevices {
		r, err := BlockDevice(p, "rw")
		if err != nil {
			return nil, err
		}
		a = append(a, r)
	}
	return a, nil
}

// BlockDevice returns a rule for the block device at path (its major:minor from stat).
func BlockDevice(path, access string) (Rule, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Rule{}, fmt.Errorf("block device %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return Rule{}, fmt.Errorf("%s is not a block device", path)
	}
	rdev := uint64(st.Rdev) //nolint:unconvert // Rdev is not uint64 on every arch
	r := Rule{Type: Block, Major: int64(unix.Major(rdev)), Minor: int64(unix.Minor(rdev)), Access: access}
	return r, r.validate()
}
