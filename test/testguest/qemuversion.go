package testguest

import (
	"fmt"
	"os/exec"
	"regexp"
)

// QEMUBinary is the QEMU the tests start (from PATH).
const QEMUBinary = "qemu-system-x86_64"

var qemuVersionLine = regexp.MustCompile(`(?m)^QEMU emulator version (\d+\.\d+\.\d+)`)

// QEMUVersion is the version `qemu-system-x86_64 --version` reports, e.g.
// "7.2.22": what QMP's greeting and query-version must say for the binary
// the tests start, whichever QEMU this host (or hack/distro-test.sh's
// Debian 13 root) has.
func QEMUVersion() (string, error) {
	out, err := exec.Command(QEMUBinary, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", QEMUBinary, err)
	}
	return ParseQEMUVersion(out)
}

// ParseQEMUVersion reads the version from `qemu-system-x86_64 --version`'s
// output.
func ParseQEMUVersion(out []byte) (string, error) {
	m := qemuVersionLine.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version: no version in %q", QEMUBinary, out)
	}
	return string(m[1]), nil
}
