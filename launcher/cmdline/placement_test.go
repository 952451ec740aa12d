package cmdline

import (
	"slices"
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// argsAfter are the values of every occurrence of flag in argv.
func argsAfter(argv []string, flag string) []string {
	var out []string
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == flag {
			out = append(out, argv[i+1])
		}
	}
	return out
}

func TestPlacementArgv(t *testing.T) {
	numa := &v1.NUMA{GuestMappingPassthrough: &v1.NUMAGuestMappingPassthrough{}}
	for _, tc := range []struct {
		name      string
		cores     uint32
		numa      bool
		placement Placement
		machine   string // -machine must contain it ("" = no memory-backend)
		objects   []string
		numaArgs  []string
		err       string
	}{
		{name: "hugepages", cores: 1, placement: Placement{Hugepages: "/hp/kemu-1"},
			machine: "memory-backend=mem",
			objects: []string{"memory-backend-file,id=mem,size=128M,mem-path=/hp/kemu-1,prealloc=on,share=off"}},
		{name: "numa on two host nodes", cores: 3, numa: true,
			placement: Placement{Hugepages: "/hp/d", NUMA: []NUMANode{{HostNode: 0, VCPUs: []int{0, 2}}, {HostNode: 1, VCPUs: []int{1}}}},
			objects: []string{
				"memory-backend-file,id=mem-node0,size=84M,mem-path=/hp/d,prealloc=on,share=off,host-nodes=0,policy=bind",
				"memory-backend-file,id=mem-node1,size=44M,mem-path=/hp/d,prealloc=on,share=off,host-nodes=1,policy=bind"},
			numaArgs: []string{"node,nodeid=0,cpus=0,cpus=2,memdev=mem-node0", "node,nodeid=1,cpus=1,memdev=mem-node1"}},
		{name: "no hugetlbfs", cores: 1, err: "spec.domain.memory.hugepages: no hugetlbfs directory"},
		{name: "numa unplaced", cores: 1, numa: true, placement: Placement{Hugepages: "/hp"},
			err: "spec.domain.cpu.numa.guestMappingPassthrough: no guest NUMA nodes placed"},
		{name: "a node without a page", cores: 2, numa: true,
			placement: Placement{Hugepages: "/hp", NUMA: []NUMANode{{HostNode: 0, VCPUs: []int{0}}, {HostNode: 1, VCPUs: []int{}}, {HostNode: 2, VCPUs: []int{1}}}},
			err:       "would get no memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t, baseYAML)
			d := &in.VMI.Spec.Domain
			d.CPU.Cores = tc.cores
			d.CPU.DedicatedCPUPlacement = true
			if tc.numa {
				d.CPU.NUMA = numa
			}
			d.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"}
			in.Placement = tc.placement
			argv, err := Build(in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := argAfter(argv, "-machine")
			if strings.Contains(m, "memory-backend") != (tc.machine != "") || !strings.Contains(m, tc.machine) {
				t.Errorf("-machine %s, want %q", m, tc.machine)
			}
			var objs []string
			for _, o := range argsAfter(argv, "-object") {
				if strings.HasPrefix(o, "memory-backend") {
					objs = append(objs, o)
				}
			}
			if !slices.Equal(objs, tc.objects) {
				t.Errorf("memory objects\n%q\nwant\n%q", objs, tc.objects)
			}
			if got := argsAfter(argv, "-numa"); !slices.Equal(got, tc.numaArgs) {
				t.Errorf("-numa %q, want %q", got, tc.numaArgs)
			}
		})
	}
}
