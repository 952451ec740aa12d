package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestDiskCacheAndIO: KubeVirt's defaults for a disk's cache and io modes,
// which depend on the node's file (O_DIRECT, preallocation, block device).
func TestDiskCacheAndIO(t *testing.T) {
	tests := []struct {
		name                          string
		disk                          Disk
		directIO, block, preallocated bool
		cache                         DriverCache
		io                            DriverIO
	}{
		{name: "O_DIRECT: none, sparse file: threads", directIO: true, cache: CacheNone, io: IOThreads},
		{name: "O_DIRECT, preallocated file: none, native", directIO: true, preallocated: true, cache: CacheNone, io: IONative},
		{name: "O_DIRECT, block device: none, native", directIO: true, block: true, cache: CacheNone, io: IONative},
		{name: "no O_DIRECT: writethrough, threads", preallocated: true, cache: CacheWriteThrough, io: IOThreads},
		{name: "no O_DIRECT, block device: writethrough, threads", block: true, cache: CacheWriteThrough, io: IOThreads},
		{name: "cache asked for wins", disk: Disk{Cache: CacheWriteBack}, directIO: true, block: true, cache: CacheWriteBack, io: IOThreads},
		{name: "writethrough asked for", disk: Disk{Cache: CacheWriteThrough}, directIO: true, cache: CacheWriteThrough, io: IOThreads},
		{name: "none asked for without O_DIRECT stays none (the launcher refuses it)", disk: Disk{Cache: CacheNone}, cache: CacheNone, io: IOThreads},
		{name: "shareable: none", disk: Disk{Shareable: ptr(true)}, cache: CacheNone, io: IOThreads},
		{name: "shareable without O_DIRECT: still none", disk: Disk{Shareable: ptr(true)}, block: true, cache: CacheNone, io: IONative},
		{name: "not shareable: the node decides", disk: Disk{Shareable: ptr(false)}, cache: CacheWriteThrough, io: IOThreads},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := DiskCache(&tt.disk, tt.directIO)
			io := DefaultDiskIO(cache, tt.block, tt.preallocated)
			if cache != tt.cache || io != tt.io {
				t.Errorf("cache %s, io %s; want %s, %s", cache, io, tt.cache, tt.io)
			}
		})
	}
}

// TestPlanIOThreads: KubeVirt's iothread allocation (its converter's
// iothreads package and assignDiskIOThread), case by case.
func TestPlanIOThreads(t *testing.T) {
	virtio := func(name string, dedicated bool) Disk {
		d := Disk{Name: name, Disk: &DiskTarget{Bus: DiskBusVirtio}}
		if dedicated {
			d.DedicatedIOThread = ptr(true)
		}
		return d
	}
	sata := Disk{Name: "s", Disk: &DiskTarget{Bus: DiskBusSATA}}
	cd := Disk{Name: "cd", CDRom: &CDRomTarget{Bus: DiskBusSATA}}
	policy := func(p IOThreadsPolicy) *IOThreadsPolicy { return &p }
	cpu := func(kind corev1.ResourceName, q string) ResourceRequirements {
		return ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}.with(kind, q)
	}
	tests := []struct {
		name      string
		policy    *IOThreadsPolicy
		resources ResourceRequirements
		disks     []Disk
		threads   int
		want      map[string]int
	}{
		{name: "no policy, no dedicated disk: none", disks: []Disk{virtio("a", false)}},
		{name: "shared: one for all", policy: policy(IOThreadsPolicyShared),
			disks: []Disk{virtio("a", false), virtio("b", false), sata}, threads: 1, want: map[string]int{"a": 1, "b": 1}},
		{name: "no policy, a dedicated disk: the others share one, the dedicated one follows",
			disks: []Disk{virtio("a", false), virtio("own", true), virtio("b", false)}, threads: 2,
			want: map[string]int{"a": 1, "own": 2, "b": 1}},
		{name: "shared with only dedicated disks: a shared thread nobody uses", policy: policy(IOThreadsPolicyShared),
			disks: []Disk{virtio("x", true), virtio("y", true)}, threads: 3, want: map[string]int{"x": 2, "y": 3}},
		{name: "auto, no CPU asked: a pool of 2", policy: policy(IOThreadsPolicyAuto),
			disks: []Disk{virtio("a", false), virtio("b", false), virtio("c", false)}, threads: 2,
			want: map[string]int{"a": 1, "b": 2, "c": 1}},
		{name: "auto, 2 CPUs requested: 4, the SATA disk and CD-ROM counted", policy: policy(IOThreadsPolicyAuto),
			resources: cpu("requests", "2"), disks: []Disk{virtio("a", false), virtio("b", false), virtio("own", true), sata, cd},
			threads: 4, want: map[string]int{"a": 1, "b": 2, "own": 4}},
		{name: "auto, limits when no requests, rounded up", policy: policy(IOThreadsPolicyAuto),
			resources: cpu("limits", "1500m"), disks: []Disk{virtio("a", false), virtio("b", false), virtio("c", false), virtio("d", false), virtio("e", false)},
			threads: 4, want: map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 1}},
		{name: "auto, fewer disks than the pool", policy: policy(IOThreadsPolicyAuto), resources: cpu("requests", "8"),
			disks: []Disk{virtio("a", false)}, threads: 1, want: map[string]int{"a": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &VirtualMachineInstanceSpec{Domain: DomainSpec{IOThreadsPolicy: tt.policy, Resources: tt.resources,
				Devices: Devices{Disks: tt.disks}}}
			got := PlanIOThreads(spec)
			if got.Threads != tt.threads || len(got.Disks) != len(tt.want) {
				t.Fatalf("plan %+v, want %d threads, disks %v", got, tt.threads, tt.want)
			}
			for name, n := range tt.want {
				if got.Disks[name] != n {
					t.Errorf("disk %s: iothread %d, want %d (plan %+v)", name, got.Disks[name], n, got)
				}
			}
		})
	}
}

func (r ResourceRequirements) with(kind corev1.ResourceName, q string) ResourceRequirements {
	list := r.Requests
	if kind == "limits" {
		list = r.Limits
	}
	list[corev1.ResourceCPU] = resource.MustParse(q)
	return r
}

func TestBlockQueues(t *testing.T) {
	d := &DomainSpec{CPU: &CPU{Sockets: 2, Cores: 3, Threads: 1}}
	if n := BlockQueues(d); n != 0 {
		t.Errorf("without blockMultiQueue: %d", n)
	}
	d.Devices.BlockMultiQueue = ptr(false)
	if n := BlockQueues(d); n != 0 {
		t.Errorf("blockMultiQueue false: %d", n)
	}
	d.Devices.BlockMultiQueue = ptr(true)
	if n := BlockQueues(d); n != 6 {
		t.Errorf("blockMultiQueue with 6 vCPUs: %d", n)
	}
}
