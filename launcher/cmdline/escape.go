package cmdline

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Escape makes v safe as the value in a QEMU option list
// ("driver,key=value,..."): commas are doubled, which both of QEMU's
// option parsers (QemuOpts and keyval) read back as one literal comma.
// Values QEMU cannot take faithfully are refused: control characters
// (newline, NUL, ...) and invalid UTF-8 (QEMU reports names back in JSON).
//
// It is the one escaping function of this package: every value that reaches
// an option list goes through it (see opts). Whole arguments that are not
// option lists (-kernel, -initrd, -append, -uuid) are not escaped but checked
// with CheckArg.
func Escape(v string) (string, error) {
	if err := CheckArg(v); err != nil {
		return "", err
	}
	return strings.ReplaceAll(v, ",", ",,"), nil
}

// CheckArg reports whether v can be passed to QEMU as it is, as a whole
// argument: no control characters, valid UTF-8.
func CheckArg(v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%q is not valid UTF-8", v)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q contains a control character (%U)", v, r)
		}
	}
	return nil
}

// opts builds one option list: a head (driver, backend or type; may be "")
// followed by key=value pairs. Keys are this package's constants; every
// head and value goes through Escape. The first error is kept and names the
// option.
type opts struct {
	parts []string
	err   error
}

func newOpts(head string) *opts {
	o := &opts{}
	if head != "" {
		o.push("", head)
	}
	return o
}

func (o *opts) push(key, val string) {
	e, err := Escape(val)
	if err == nil && key == "" && strings.ContainsRune(val, '=') {
		// The first value has an implied key (driver, type): QEMU takes
		// "a=b,…" as key a, so an '=' there would name a key of its own.
		err = fmt.Errorf("%q contains '=', which QEMU reads as a key in the first position", val)
	}
	if err != nil {
		if o.err == nil {
			name := key
			if name == "" {
				name = "type"
			}
			o.err = fmt.Errorf("option %s: %w", name, err)
		}
		return
	}
	if key == "" {
		o.parts = append(o.parts, e)
	} else {
		o.parts = append(o.parts, key+"="+e)
	}
}

// add appends key=val.
func (o *opts) add(key, val string) *opts { o.push(key, val); return o }

// addNonEmpty appends key=val unless val is "".
func (o *opts) addNonEmpty(key, val string) *opts {
	if val != "" {
		o.push(key, val)
	}
	return o
}

// addInt appends key=n.
func (o *opts) addInt(key string, n int) *opts { o.push(key, strconv.Itoa(n)); return o }

// on appends key=on when b.
func (o *opts) on(key string, b bool) *opts {
	if b {
		o.push(key, "on")
	}
	return o
}

// String returns the option list.
func (o *opts) String() (string, error) {
	if o.err != nil {
		return "", o.err
	}
	return strings.Join(o.parts, ","), nil
}

// arg returns {flag, option list}.
func (o *opts) arg(flag string) ([]string, error) {
	s, err := o.String()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return []string{flag, s}, nil
}
