package testguest

import "testing"

func TestParseQEMUVersion(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)\nCopyright (c) 2003-2022 Fabrice Bellard and the QEMU Project developers\n", "7.2.22"},
		{"QEMU emulator version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)\nCopyright (c) 2003-2025 Fabrice Bellard and the QEMU Project developers\n", "10.0.13"},
		{"QEMU emulator version 8.2.2 (Debian 1:8.2.2+ds-0ubuntu1.4)\n", "8.2.2"},
		{"qemu-img version 7.2.22\n", ""},
		{"", ""},
	} {
		got, err := ParseQEMUVersion([]byte(tc.out))
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("ParseQEMUVersion(%q) = %q, %v; want %q", tc.out, got, err, tc.want)
		}
	}
}
