package cmdline

import (
	"slices"
	"strings"
	"testing"
)

// This file reads argv back the way QEMU 7.2 does, from its documented
// rules (docs/devel/qapi-code-gen, util/qemu-option.c, util/keyval.c), so the
// tests can check that what Build rendered is what QEMU sees: no user string
// adds, removes or changes a key.
//
// QemuOpts (-machine, -device, -netdev, -chardev, -object, -name, -smbios,
// -mon, -msg, -boot, -sandbox, -smp, -global) and keyval (-blockdev) split an
// option list the same way for what kemu renders:
//   - "key=value" pairs separated by ','; in a value ",," is one ',' and a
//     single ',' ends it; a key ends at the first '=' or ',';
//   - the first element may omit its key when the option has an implied one
//     (-device's driver, -machine's type, …): it is then the value of that
//     key, unless an '=' comes before the first ',';
//   - any later element without '=' is a flag: "foo" is foo=on, "nofoo"
//     foo=off, and "help" or "?" asks for help instead of running.

// qemuOpt is one key and its unescaped value.
type qemuOpt struct{ key, val string }

// optValue is QEMU's get_opt_value: the value up to the first single ','
// (",," is a literal ','), and the rest after that comma ("" at the end).
func optValue(s string) (val, rest string, more bool) {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, ',')
		if i < 0 {
			b.WriteString(s)
			return b.String(), "", false
		}
		if i+1 < len(s) && s[i+1] == ',' {
			b.WriteString(s[:i+1])
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		return b.String(), s[i+1:], true
	}
}

// parseQemuOpts splits an option list as QemuOpts does (opts_do_parse and
// get_opt_name_value); implied is the option's implied first key ("" for
// none). help reports a request for help (QEMU would print it and exit).
func parseQemuOpts(s, implied string) (opts []qemuOpt, help bool) {
	first := true
	for s != "" {
		n := strings.IndexAny(s, "=,")
		if n < 0 {
			n = len(s)
		}
		var o qemuOpt
		switch {
		case n < len(s) && s[n] == '=':
			o.key = s[:n]
			o.val, s, _ = optValue(s[n+1:])
		case first && implied != "":
			o.key = implied
			o.val, s, _ = optValue(s)
		default: // a flag
			o.key, o.val = s[:n], "on"
			if strings.HasPrefix(o.key, "no") {
				o.key, o.val = o.key[2:], "off"
			} else if o.key == "help" || o.key == "?" {
				help = true
			}
			s = strings.TrimPrefix(s[n:], ",")
		}
		first = false
		opts = append(opts, o)
	}
	return opts, help
}

// multibootModules is how QEMU's multiboot loader reads -initrd: modules
// separated by ',' (",," a literal comma), each a file name, then after the
// first ' ' the module's arguments. A Linux kernel's -initrd is one file
// name as it is; kemu's is only safe when both readings agree.
func multibootModules(initrd string) (files []string) {
	for {
		m, rest, more := optValue(initrd)
		name, _, _ := strings.Cut(m, " ")
		files = append(files, name)
		if !more {
			return files
		}
		initrd = rest
	}
}

func TestParseQemuOpts(t *testing.T) {
	for _, tc := range []struct {
		in, implied string
		want        []qemuOpt
		help        bool
	}{
		{in: "virtio-blk-pci,drive=d,id=ua-x", implied: "driver",
			want: []qemuOpt{{"driver", "virtio-blk-pci"}, {"drive", "d"}, {"id", "ua-x"}}},
		{in: "driver=file,filename=/a,,b,,,,c,read-only=on",
			want: []qemuOpt{{"driver", "file"}, {"filename", "/a,b,,c"}, {"read-only", "on"}}},
		{in: "q35,accel=tcg", implied: "type", want: []qemuOpt{{"type", "q35"}, {"accel", "tcg"}}},
		// An '=' before the first ',' names a key, implied or not.
		{in: "accel=kvm,x=1", implied: "type", want: []qemuOpt{{"accel", "kvm"}, {"x", "1"}}},
		// ",," before the '=': the implied value holds both.
		{in: "a,,b=c,d=e", implied: "type", want: []qemuOpt{{"type", "a,b=c"}, {"d", "e"}}},
		{in: "serial=a,read-only", want: []qemuOpt{{"serial", "a"}, {"read-only", "on"}}},
		{in: "serial=a,nodiscard", want: []qemuOpt{{"serial", "a"}, {"discard", "off"}}},
		{in: "virtio-blk-pci,help", implied: "driver", want: []qemuOpt{{"driver", "virtio-blk-pci"}, {"help", "on"}}, help: true},
		{in: "serial=x,,y", want: []qemuOpt{{"serial", "x,y"}}},
		{in: "serial=x,", want: []qemuOpt{{"serial", "x"}}}, // a trailing ',' ends the list
		{in: "serial=", want: []qemuOpt{{"serial", ""}}},
		{in: "k=a=b", want: []qemuOpt{{"k", "a=b"}}},
	} {
		got, help := parseQemuOpts(tc.in, tc.implied)
		if !slices.Equal(got, tc.want) || help != tc.help {
			t.Errorf("parseQemuOpts(%q, %q) = %q help %v, want %q help %v", tc.in, tc.implied, got, help, tc.want, tc.help)
		}
	}
}

func TestMultibootModules(t *testing.T) {
	for in, want := range map[string][]string{
		"/k/initrd.img":           {"/k/initrd.img"},
		"/k/a,/etc/shadow":        {"/k/a", "/etc/shadow"},
		"/k/a,,b":                 {"/k/a,b"},
		"/k/mod1 arg=foo,/k/mod2": {"/k/mod1", "/k/mod2"},
	} {
		if got := multibootModules(in); !slices.Equal(got, want) {
			t.Errorf("multibootModules(%q) = %q, want %q", in, got, want)
		}
	}
}

// Escape's output is always read back by QEMU as the one value it was.
func TestEscapeQemuOpts(t *testing.T) {
	for _, v := range []string{"", "a", ",", ",,", "a,b", "x=y", "a,nob", "help", ",help", "id=x", "a,,b,", "ü,="} {
		e, err := Escape(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, implied := range []string{"", "driver"} {
			got, help := parseQemuOpts("drv=x,k="+e+",z=1", implied)
			want := []qemuOpt{{"drv", "x"}, {"k", v}, {"z", "1"}}
			if !slices.Equal(got, want) || help {
				t.Errorf("value %q escaped as %q: read back as %q (help %v)", v, e, got, help)
			}
		}
	}
}

// The first value of a list has an implied key: an '=' there would name a
// key instead, so opts refuses it (commas are escaped as anywhere).
func TestOptsHead(t *testing.T) {
	if _, err := newOpts("accel=kvm").add("x", "1").String(); err == nil || !strings.Contains(err.Error(), "'='") {
		t.Errorf("head with '=': error %v", err)
	}
	s, err := newOpts("a,b").add("x", "1").String()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := parseQemuOpts(s, "type"); !slices.Equal(got, []qemuOpt{{"type", "a,b"}, {"x", "1"}}) {
		t.Errorf("head with ',': %q read back as %q", s, got)
	}
}

func TestSocketChardev(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    SocketChardev
		want string // the -chardev value, or the error's text
		err  bool
	}{
		{name: "path", c: SocketChardev{ID: "qmp", Path: "/run/kemu/qmp.sock"}, want: "socket,id=qmp,path=/run/kemu/qmp.sock,server=on,wait=off"},
		{name: "fd", c: SocketChardev{ID: "qmp", FD: 5}, want: "socket,id=qmp,fd=5,server=on,wait=off"},
		{name: "both", c: SocketChardev{ID: "qmp", Path: "/x", FD: 5}, want: "a socket path and an fd", err: true},
		{name: "stdio fd", c: SocketChardev{ID: "qmp", FD: 1}, want: "not an inherited one", err: true},
		{name: "neither", c: SocketChardev{ID: "qmp"}, want: "no socket path", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, err := tc.c.Args()
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Args() = %q, %v; want an error with %q", args, err, tc.want)
				}
				return
			}
			if err != nil || len(args) != 2 || args[0] != "-chardev" || args[1] != tc.want {
				t.Errorf("Args() = %q, %v; want -chardev %s", args, err, tc.want)
			}
		})
	}
}
