package local

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kemu-dev/kemu/api/manifest"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/manifests"
)

// readVMI reads the one VirtualMachineInstance of a manifest.
func readVMI(file string, stdin io.Reader) (*v1.VirtualMachineInstance, error) {
	docs, err := manifests.Read(file, stdin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var vmis []*v1.VirtualMachineInstance
	for _, d := range docs {
		if len(d.Errors) > 0 {
			var b strings.Builder
			for _, e := range d.Errors {
				fmt.Fprintf(&b, "\n  %s", e.Error())
			}
			return nil, fmt.Errorf("%s#%d %s is not valid:%s", file, d.Index, d.Describe(), b.String())
		}
		if vmi, ok := d.Object.(*v1.VirtualMachineInstance); ok {
			vmis = append(vmis, vmi)
		}
	}
	if len(vmis) != 1 {
		return nil, fmt.Errorf("%s: %d VirtualMachineInstances, want exactly one (a %s runs in a cluster)", file, len(vmis), manifest.KindVM)
	}
	if vmis[0].Namespace == "" {
		vmis[0].Namespace = "default"
	}
	return vmis[0], nil
}

// maxRunDirName is how much of the VMI's name the run directory's name
// takes: /tmp/kemu-<32>-<10 digits>/qmp-debug.sock is 74 bytes, within a
// unix socket path's 107.
const maxRunDirName = 32

// newRunDir makes the runtime directory of a VMI named name under the
// temporary directory, named after its host name, cut: a VMI name may have
// 253 characters, a file name 255, and the QMP and console sockets in the
// directory must fit in sun_path.
func newRunDir(name string) (string, error) {
	host := v1.DeriveHostname(name)
	return os.MkdirTemp("", "kemu-"+host[:min(len(host), maxRunDirName)]+"-")
}
