package manifest

import (
	"strings"
	"testing"
)

func TestExplain(t *testing.T) {
	find := func(fields []Field, path string) (Field, bool) {
		for _, f := range fields {
			if f.Path == path {
				return f, true
			}
		}
		return Field{}, false
	}
	for _, tc := range []struct {
		what      string
		recursive bool
		want      map[string]Support // a few fields of the listing
	}{
		{"vmi.spec.domain.devices.disks", false, map[string]Support{
			"spec.domain.devices.disks[].serial": Supported,
			"spec.domain.devices.disks[].tag":    Unsupported, // declared Unsupported
		}},
		{"VMI.spec.volumes[]", false, map[string]Support{
			"spec.volumes[].configMap":     Supported,
			"spec.volumes[].containerPath": Supported,
			"spec.volumes[].memoryDump":    Unsupported, // declared Unsupported
		}},
		{"vm.spec", false, map[string]Support{"spec.runStrategy": Supported, "spec.template": Supported}},
		{"vmi.spec.networks[].pod", false, map[string]Support{"spec.networks[].pod.vmNetworkCIDR": Supported}},
		{"vmim", true, map[string]Support{"spec.vmiName": Supported}},
		{"vmi", true, map[string]Support{
			"spec.domain.devices.disks[].cdrom.bus":        Supported,
			"spec.volumes[].configMap.volumeLabel":         Supported,
			"spec.domain.memory.guest":                     Supported,
			"spec.volumes[].containerDisk.imagePullSecret": Unsupported,
		}},
	} {
		fields, err := Explain(tc.what, tc.recursive)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		for p, s := range tc.want {
			f, ok := find(fields, p)
			if !ok || f.Support != s {
				t.Errorf("%s: %s = %+v (found %v), want %s", tc.what, p, f, ok, s)
			}
		}
		for _, f := range fields {
			if strings.HasPrefix(f.Path, "status") || strings.HasPrefix(f.Path, "metadata") {
				t.Errorf("%s lists %s", tc.what, f.Path)
			}
		}
	}
	for _, bad := range []string{"pod", "vmi.spec.nosuch", "vm.spec.template.spec.domain.devices.gpuz"} {
		if _, err := Explain(bad, false); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
