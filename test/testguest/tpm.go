package testguest

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// TPMCommand is a guest shell command (busybox) that sends the raw TPM 2.0
// command cmd to /dev/tpm0 (printf, every byte an octal escape) and prints
// the response in hex on one line. The test guest has no tpm2-tools.
func TPMCommand(cmd []byte) string {
	var esc strings.Builder
	for _, b := range cmd {
		fmt.Fprintf(&esc, `\%03o`, b)
	}
	return `(exec 3<>/dev/tpm0 && printf '` + esc.String() + `' >&3 && dd bs=256 count=1 <&3 2>/dev/null | od -An -tx1 | tr -d ' \n')`
}

// Raw TPM 2.0 commands on the NV index TPMNVIndex (8 bytes, owner and
// index authorization with empty passwords), each with one password
// session (TPM_RS_PW, empty nonce and HMAC), and the prefixes of their
// responses.
var (
	tpmPWSession = []byte{0, 0, 0, 9, 0x40, 0, 0, 9, 0, 0, 0, 0, 0}
	tpmNVIndex   = []byte{0x01, 0x50, 0x00, 0x01}
	// TPMNVDefineSpace is TPM2_NV_DefineSpace of the index: owner and
	// index read and write, SHA-256 name, 8 bytes.
	TPMNVDefineSpace = tpmConcat([]byte{0x80, 0x02, 0, 0, 0, 45, 0, 0, 0x01, 0x2a, 0x40, 0, 0, 1}, tpmPWSession,
		[]byte{0, 0, 0, 14}, tpmNVIndex, []byte{0, 0x0b, 0x00, 0x06, 0x00, 0x06, 0, 0, 0, 8})
	// TPMNVRead is TPM2_NV_Read of the index's 8 bytes.
	TPMNVRead = tpmConcat([]byte{0x80, 0x02, 0, 0, 0, 35, 0, 0, 0x01, 0x4e}, tpmNVIndex, tpmNVIndex, tpmPWSession,
		[]byte{0, 8, 0, 0})
)

// TPM response prefixes in hex.
const (
	// TPMSessionsOK starts a successful response with a session and no
	// parameters (NV_DefineSpace, NV_Write): tag 8002, size 19, rc 0.
	TPMSessionsOK = "800200000013" + "00000000"
	// TPMNVDefined is the response of NV_DefineSpace when the index
	// exists: tag 8001, size 10, TPM_RC_NV_DEFINED.
	TPMNVDefined = "80010000000a" + "0000014c"
)

// TPMNVWrite is TPM2_NV_Write of data into the index at offset 0.
func TPMNVWrite(data [8]byte) []byte {
	return tpmConcat([]byte{0x80, 0x02, 0, 0, 0, 43, 0, 0, 0x01, 0x37}, tpmNVIndex, tpmNVIndex, tpmPWSession,
		[]byte{0, 8}, data[:], []byte{0, 0})
}

// TPMNVReadOK is the hex prefix of NV_Read's response holding data: tag
// 8002, size 29, rc 0, parameters 10 bytes, a TPM2B of 8.
func TPMNVReadOK(data [8]byte) string {
	return "80020000001d" + "00000000" + "0000000a" + "0008" + hex.EncodeToString(data[:])
}

func tpmConcat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}
