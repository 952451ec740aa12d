package cmdserver

import (
	"reflect"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Only interfaces[].state may change live; the changes are what the link
// must do, and both specs lose their states (so diffPaths sees the rest).
func TestLinkChanges(t *testing.T) {
	spec := func(states ...v1.InterfaceState) *v1.VirtualMachineInstanceSpec {
		s := &v1.VirtualMachineInstanceSpec{}
		for i, st := range states {
			s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, v1.Interface{Name: string(rune('a' + i)), State: st})
		}
		return s
	}
	for _, tc := range []struct {
		name      string
		cur, next *v1.VirtualMachineInstanceSpec
		want      []linkChange
		cleared   bool
	}{
		{"none", spec("", "down"), spec("up", "down"), nil, true},
		{"down", spec("", "up"), spec("down", "up"), []linkChange{{"a", false}}, true},
		{"up", spec("down"), spec(""), []linkChange{{"a", true}}, true},
		{"both", spec("down", "up"), spec("up", "down"), []linkChange{{"a", true}, {"b", false}}, true},
		{"renamed", spec("down"), &v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Devices: v1.Devices{Interfaces: []v1.Interface{{Name: "z"}}}}}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := linkChanges(tc.cur, tc.next)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("changes %v, want %v", got, tc.want)
			}
			if tc.cleared && !reflect.DeepEqual(tc.cur, tc.next) {
				t.Errorf("specs differ after clearing the states: %+v %+v", tc.cur, tc.next)
			}
		})
	}
}
