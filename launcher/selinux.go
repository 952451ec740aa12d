package launcher

import (
	"fmt"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/devices/selinux"
	goselinux "github.com/opencontainers/selinux/go-selinux"
)

// labelFiles chooses the VM's SELinux labels (selinux.ForVM: the pod's own
// category pair in a pod, a fresh sVirt pair standalone) and labels the
// VM's runtime directory with them. A no-op, logged once, when SELinux is
// disabled.
func (l *Launcher) labelFiles() error {
	if !selinux.Enabled() {
		return l.label.LabelTree(l.cfg.Dir) // logs that SELinux is off
	}
	own, err := goselinux.CurrentLabel()
	if err != nil {
		return fmt.Errorf("launcher: reading the launcher's SELinux label: %w", err)
	}
	if l.label, err = selinux.ForVM(selinux.DefaultConfig(), own, selinux.RunningLabels()); err != nil {
		return fmt.Errorf("launcher: choosing the VM's SELinux labels: %w", err)
	}
	if err := l.label.LabelTree(l.cfg.Dir); err != nil {
		return fmt.Errorf("launcher: labelling the VM's files: %w", err)
	}
	if l.tpm != nil && len(l.tpm.stateFiles) > 0 {
		// A persistent TPM's state on the backend storage: through the
		// descriptors persistentState opened (/proc/self/fd/N reaches
		// exactly that file, whatever the claim's paths became since).
		paths := make([]string, 0, len(l.tpm.stateFiles))
		for _, f := range l.tpm.stateFiles {
			paths = append(paths, fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
		}
		if err := l.label.LabelFiles(paths...); err != nil {
			return fmt.Errorf("launcher: labelling the TPM's persistent state: %w", err)
		}
	}
	klog.InfoS("SELinux labels", "process", l.label.Process, "file", l.label.File)
	return nil
}
