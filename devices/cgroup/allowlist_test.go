package cgroup

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestDefault(t *testing.T) {
	base := []string{"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm", "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm"}
	a, err := Default(false, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Strings(); !reflect.DeepEqual(got, base) {
		t.Fatalf("Default() = %v", got)
	}
	a, err = Default(true, true, true)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]string(nil), base...), "c 10:232 rwm", "c 10:200 rwm", "c 10:238 rwm")
	if got := a.Strings(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Default(kvm, tun, vhost) = %v", got)
	}
	a, err = Default(false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Strings(); !reflect.DeepEqual(got, append(append([]string(nil), base...), "c 10:200 rwm")) {
		t.Fatalf("Default(tun) = %v", got)
	}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultBlockDevices(t *testing.T) {
	if _, err := Default(false, false, false, "/nonexistent/disk"); err == nil || !strings.Contains(err.Error(), "/nonexistent/disk") {
		t.Fatalf("missing device: %v", err)
	}
	if _, err := Default(false, false, false, "/dev/null"); err == nil || !strings.Contains(err.Error(), "not a block device") {
		t.Fatalf("char device: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root for mknod (make test runs as root)")
	}
	p := filepath.Join(t.TempDir(), "disk")
	if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(259, 1048575))); err != nil {
		t.Fatal(err)
	}
	a, err := Default(true, false, false, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := a[len(a)-1].String(); got != "b 259:1048575 rw" {
		t.Fatalf("block rule %q", got)
	}
}

func TestValidate(t *testing.T) {
	for _, r := range []Rule{
		{'x', 1, 3, "rwm"}, {Char, -2, 3, "r"}, {Char, 1, 1 << 40, "r"}, {Char, 1, 3, ""}, {Char, 1, 3, "rx"},
	} {
		if err := (Allowlist{Null, r}).Validate(); err == nil {
			t.Errorf("%v accepted", r)
		}
		if _, err := program(Allowlist{r}); err == nil {
			t.Errorf("program(%v) accepted", r)
		}
	}
	if err := (Allowlist{{All, Any, Any, "m"}, {Block, 8, Any, "r"}}).Validate(); err != nil {
		t.Fatal(err)
	}
}
