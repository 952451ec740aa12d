package cmdline

import (
	"fmt"
	"path/filepath"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// TPMID is the id of the TPM's chardev ("<TPMID>-ctrl"), backend and
// device.
const TPMID = "tpm0"

// TPM models, KubeVirt's: TPMModel for a TPM whose state is not
// persistent, PersistentTPMModel for one whose state is
// (domain.devices.tpm.persistent: true).
const (
	TPMModel           = "tpm-tis"
	PersistentTPMModel = "tpm-crb"
)

// TPMSocket is swtpm's control socket in the VM's runtime directory dir.
func TPMSocket(dir string) string { return filepath.Join(dir, "swtpm.sock") }

// TPM is an emulated TPM 2.0 served by swtpm on its control socket:
// -chardev socket,id=<ID>-ctrl,path=Socket (QEMU connects; swtpm
// listens), -tpmdev emulator,id=ID,chardev=<ID>-ctrl and -device
// Model,tpmdev=ID.
type TPM struct {
	ID, Model, Socket string
}

// Args implements Device.
func (t TPM) Args() ([]string, error) {
	switch {
	case !idPattern.MatchString(t.ID):
		return nil, fmt.Errorf("-tpmdev: bad id %q", t.ID)
	case t.Model != "tpm-tis" && t.Model != "tpm-crb":
		return nil, fmt.Errorf("-tpmdev %s: model %q is not tpm-tis or tpm-crb", t.ID, t.Model)
	case t.Socket == "":
		return nil, fmt.Errorf("-tpmdev %s: no socket path", t.ID)
	case len(t.Socket) > MaxSocketPath:
		return nil, fmt.Errorf("-tpmdev %s: socket path is %d bytes, longer than %d", t.ID, len(t.Socket), MaxSocketPath)
	}
	chr := t.ID + "-ctrl"
	c, err := newOpts("socket").add("id", chr).add("path", t.Socket).arg("-chardev")
	if err != nil {
		return nil, err
	}
	be, err := newOpts("emulator").add("id", t.ID).add("chardev", chr).arg("-tpmdev")
	if err != nil {
		return nil, err
	}
	dev, err := newOpts(t.Model).add("tpmdev", t.ID).arg("-device")
	if err != nil {
		return nil, err
	}
	return append(append(c, be...), dev...), nil
}

// tpm: domain.devices.tpm, unless enabled: false; swtpm's socket in the
// runtime directory (Paths.Dir). Where swtpm keeps the state is the
// launcher's business (launcher/tpm.go); QEMU sees only the model.
func (b *builder) tpm() {
	if !v1.HasTPM(&b.vmi.Spec) {
		return
	}
	const path = "spec.domain.devices.tpm"
	if b.in.Paths.Dir == "" {
		b.fail("Paths.Dir", "required for a TPM (swtpm's socket)")
		return
	}
	model := TPMModel
	if v1.HasPersistentTPM(&b.vmi.Spec) {
		model = PersistentTPMModel
	}
	b.add(path, TPM{ID: TPMID, Model: model, Socket: b.socket(path, TPMSocket(b.in.Paths.Dir))})
}
