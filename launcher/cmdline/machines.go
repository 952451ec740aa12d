package cmdline

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// Machines are the machine types of this node's QEMU, read from
// `qemu-system-x86_64 -machine help`: each name (aliases included) → the
// machine it is ("pc" → "pc-i440fx-7.2", "pc-q35-7.2" → itself). QEMU
// versions differ here (QEMU 10.0 dropped pc-i440fx-1.4 … 2.3 and has
// pc-q35-8.0 … 10.0), so kemu asks the binary instead of assuming a list.
type Machines map[string]string

// Has says whether QEMU knows the machine type name.
func (m Machines) Has(name string) bool { _, ok := m[name]; return ok }

// Resolve is the machine name stands for (an alias's target); "" = unknown.
func (m Machines) Resolve(name string) string { return m[name] }

var machineAlias = regexp.MustCompile(`\(alias of ([^ )]+)\)`)

// ParseMachineHelp reads `-machine help`'s output: a header line, then one
// machine per line, "<name>  <description>[ (alias of <target>)][ (default)]".
func ParseMachineHelp(out []byte) Machines {
	m := Machines{}
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == ' ' || strings.HasSuffix(line, ":") {
			continue // header ("Supported machines are:") or a wrapped line
		}
		name, _, _ := strings.Cut(line, " ")
		if isHelp(name) {
			continue
		}
		m[name] = name
		if a := machineAlias.FindStringSubmatch(line); a != nil {
			m[name] = a[1]
		}
	}
	return m
}

// DetectMachines runs `<binary> -machine help`.
func DetectMachines(ctx context.Context, binary string) (Machines, error) {
	out, err := exec.CommandContext(ctx, binary, "-machine", "help").Output()
	if err != nil {
		return nil, fmt.Errorf("%s -machine help: %w", binary, err)
	}
	m := ParseMachineHelp(out)
	if len(m) == 0 {
		return nil, fmt.Errorf("%s -machine help: no machine types in %q", binary, out)
	}
	return m, nil
}
