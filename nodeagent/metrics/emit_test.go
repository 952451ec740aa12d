package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// emitOnly is a collector of one target's series with fixed figures.
type emitOnly struct {
	t Target
	s *rpc.StatsResponse
}

func (e emitOnly) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}
func (e emitOnly) Collect(ch chan<- prometheus.Metric) { emit(ch, "node-1", e.t, e.s) }

func n64(v int64) *int64 { return &v }

var vm = Target{Namespace: "ns", Name: "vm", UID: "u1", Info: Info{Phase: "Running", MachineType: "q35", GuestOSName: "Debian"}}

func TestEmit(t *testing.T) {
	const info = `
# HELP kemu_vmi_info Information about a VMI running on this node (always 1): its phase, machine type and the guest OS its agent reports.
# TYPE kemu_vmi_info gauge
kemu_vmi_info{guest_os_kernel_release="",guest_os_machine="",guest_os_name="Debian",guest_os_version_id="",machine_type="q35",name="vm",namespace="ns",node="node-1",phase="Running"} 1
`
	for _, tc := range []struct {
		name  string
		t     Target
		s     *rpc.StatsResponse
		names []string
		want  string
	}{
		{name: "no answer: info only", t: vm, want: info},
		{name: "cpu, vcpus, memory", t: vm,
			s: &rpc.StatsResponse{QemuCpuTimeNanos: 2_500_000_000, QemuRssBytes: 300 << 20, BalloonActualBytes: 256 << 20,
				Vcpus: []*rpc.VCPU{{Index: 0, CpuTimeNanos: 1_000_000_000, DelayNanos: n64(250_000_000)}, {Index: 1, CpuTimeNanos: 500_000_000}}},
			names: []string{"kemu_vmi_cpu_usage_seconds_total", "kemu_vmi_vcpu_seconds_total", "kemu_vmi_vcpu_delay_seconds_total", "kemu_vmi_memory_resident_bytes", "kemu_vmi_memory_actual_balloon_bytes"},
			want: `
# HELP kemu_vmi_cpu_usage_seconds_total CPU time used by all of the VM's QEMU threads (vCPUs, I/O, emulation), from QEMU's cgroup.
# TYPE kemu_vmi_cpu_usage_seconds_total counter
kemu_vmi_cpu_usage_seconds_total{name="vm",namespace="ns",node="node-1"} 2.5
# HELP kemu_vmi_memory_actual_balloon_bytes The guest's current memory as the balloon sets it.
# TYPE kemu_vmi_memory_actual_balloon_bytes gauge
kemu_vmi_memory_actual_balloon_bytes{name="vm",namespace="ns",node="node-1"} 2.68435456e+08
# HELP kemu_vmi_memory_resident_bytes Resident memory of the VM's QEMU process.
# TYPE kemu_vmi_memory_resident_bytes gauge
kemu_vmi_memory_resident_bytes{name="vm",namespace="ns",node="node-1"} 3.145728e+08
# HELP kemu_vmi_vcpu_delay_seconds_total Time each vCPU thread waited on a host run queue, ready to run.
# TYPE kemu_vmi_vcpu_delay_seconds_total counter
kemu_vmi_vcpu_delay_seconds_total{id="0",name="vm",namespace="ns",node="node-1"} 0.25
# HELP kemu_vmi_vcpu_seconds_total CPU time used by each vCPU thread.
# TYPE kemu_vmi_vcpu_seconds_total counter
kemu_vmi_vcpu_seconds_total{id="0",name="vm",namespace="ns",node="node-1"} 1
kemu_vmi_vcpu_seconds_total{id="1",name="vm",namespace="ns",node="node-1"} 0.5
`},
		{name: "no cgroup: no cpu usage", t: vm, s: &rpc.StatsResponse{QemuRssBytes: 1},
			names: []string{"kemu_vmi_cpu_usage_seconds_total"}},
		{name: "guest memory, what the driver reported", t: vm,
			s: &rpc.StatsResponse{GuestMemory: &rpc.GuestMemoryStats{TotalBytes: n64(1000), FreeBytes: n64(300), MajorFaults: n64(7), SwapInBytes: n64(0)}},
			names: []string{"kemu_vmi_memory_available_bytes", "kemu_vmi_memory_unused_bytes", "kemu_vmi_memory_used_bytes",
				"kemu_vmi_memory_usable_bytes", "kemu_vmi_memory_cached_bytes", "kemu_vmi_memory_pgmajfault_total",
				"kemu_vmi_memory_pgminfault_total", "kemu_vmi_memory_swap_in_traffic_bytes_total", "kemu_vmi_memory_swap_out_traffic_bytes_total"},
			want: `
# HELP kemu_vmi_memory_available_bytes Memory the guest sees in all (its balloon driver's total memory).
# TYPE kemu_vmi_memory_available_bytes gauge
kemu_vmi_memory_available_bytes{name="vm",namespace="ns",node="node-1"} 1000
# HELP kemu_vmi_memory_pgmajfault_total Major page faults in the guest.
# TYPE kemu_vmi_memory_pgmajfault_total counter
kemu_vmi_memory_pgmajfault_total{name="vm",namespace="ns",node="node-1"} 7
# HELP kemu_vmi_memory_swap_in_traffic_bytes_total Memory the guest swapped in.
# TYPE kemu_vmi_memory_swap_in_traffic_bytes_total counter
kemu_vmi_memory_swap_in_traffic_bytes_total{name="vm",namespace="ns",node="node-1"} 0
# HELP kemu_vmi_memory_unused_bytes Memory the guest leaves unused (its balloon driver's free memory).
# TYPE kemu_vmi_memory_unused_bytes gauge
kemu_vmi_memory_unused_bytes{name="vm",namespace="ns",node="node-1"} 300
# HELP kemu_vmi_memory_used_bytes Memory the guest uses: its total less its free memory.
# TYPE kemu_vmi_memory_used_bytes gauge
kemu_vmi_memory_used_bytes{name="vm",namespace="ns",node="node-1"} 700
`},
		{name: "network per interface", t: vm,
			s:     &rpc.StatsResponse{Interfaces: []*rpc.InterfaceStat{{Name: "default", RxBytes: 10, TxBytes: 20, RxPackets: 1, TxPackets: 2, RxDropped: 3, TxErrors: 4}}},
			names: []string{"kemu_vmi_network_receive_bytes_total", "kemu_vmi_network_transmit_bytes_total", "kemu_vmi_network_receive_packets_dropped_total", "kemu_vmi_network_transmit_errors_total"},
			want: `
# HELP kemu_vmi_network_receive_bytes_total Bytes the guest received on an interface.
# TYPE kemu_vmi_network_receive_bytes_total counter
kemu_vmi_network_receive_bytes_total{interface="default",name="vm",namespace="ns",node="node-1"} 10
# HELP kemu_vmi_network_receive_packets_dropped_total Packets dropped on their way to the guest on an interface.
# TYPE kemu_vmi_network_receive_packets_dropped_total counter
kemu_vmi_network_receive_packets_dropped_total{interface="default",name="vm",namespace="ns",node="node-1"} 3
# HELP kemu_vmi_network_transmit_bytes_total Bytes the guest transmitted on an interface.
# TYPE kemu_vmi_network_transmit_bytes_total counter
kemu_vmi_network_transmit_bytes_total{interface="default",name="vm",namespace="ns",node="node-1"} 20
# HELP kemu_vmi_network_transmit_errors_total Transmit errors on an interface.
# TYPE kemu_vmi_network_transmit_errors_total counter
kemu_vmi_network_transmit_errors_total{interface="default",name="vm",namespace="ns",node="node-1"} 4
`},
		{name: "storage per drive, firmware left out", t: vm,
			s: &rpc.StatsResponse{Blocks: []*rpc.BlockStat{
				{Drive: "rootdisk", NodeName: "drive-rootdisk", RdBytes: 4096, WrBytes: 512, RdOperations: 2, WrOperations: 1, RdTotalTimeNanos: 1_500_000, WrTotalTimeNanos: 250_000_000},
				{NodeName: "pflash-code", RdBytes: 1}}},
			names: []string{"kemu_vmi_storage_read_traffic_bytes_total", "kemu_vmi_storage_iops_write_total", "kemu_vmi_storage_read_times_seconds_total", "kemu_vmi_storage_write_times_seconds_total"},
			want: `
# HELP kemu_vmi_storage_iops_write_total Write operations on a drive.
# TYPE kemu_vmi_storage_iops_write_total counter
kemu_vmi_storage_iops_write_total{drive="rootdisk",name="vm",namespace="ns",node="node-1"} 1
# HELP kemu_vmi_storage_read_times_seconds_total Time spent on reads from a drive.
# TYPE kemu_vmi_storage_read_times_seconds_total counter
kemu_vmi_storage_read_times_seconds_total{drive="rootdisk",name="vm",namespace="ns",node="node-1"} 0.0015
# HELP kemu_vmi_storage_read_traffic_bytes_total Bytes read from a drive.
# TYPE kemu_vmi_storage_read_traffic_bytes_total counter
kemu_vmi_storage_read_traffic_bytes_total{drive="rootdisk",name="vm",namespace="ns",node="node-1"} 4096
# HELP kemu_vmi_storage_write_times_seconds_total Time spent on writes to a drive.
# TYPE kemu_vmi_storage_write_times_seconds_total counter
kemu_vmi_storage_write_times_seconds_total{drive="rootdisk",name="vm",namespace="ns",node="node-1"} 0.25
`},
		{name: "migration under way", t: vm,
			s:     &rpc.StatsResponse{Migration: &rpc.MigrationState{Role: rpc.MigrationRole_Source, Status: "active", BytesTransferred: 100, BytesRemaining: 50, BytesTotal: 150, DirtyPagesRate: 2}},
			names: []string{"kemu_vmi_migration_data_processed_bytes", "kemu_vmi_migration_data_remaining_bytes", "kemu_vmi_migration_data_total_bytes", "kemu_vmi_migration_dirty_memory_rate_bytes"},
			want: `
# HELP kemu_vmi_migration_data_processed_bytes Memory the running outgoing migration sent so far.
# TYPE kemu_vmi_migration_data_processed_bytes gauge
kemu_vmi_migration_data_processed_bytes{name="vm",namespace="ns",node="node-1"} 100
# HELP kemu_vmi_migration_data_remaining_bytes Memory the running outgoing migration has still to send.
# TYPE kemu_vmi_migration_data_remaining_bytes gauge
kemu_vmi_migration_data_remaining_bytes{name="vm",namespace="ns",node="node-1"} 50
# HELP kemu_vmi_migration_data_total_bytes Memory the running outgoing migration moves in all.
# TYPE kemu_vmi_migration_data_total_bytes gauge
kemu_vmi_migration_data_total_bytes{name="vm",namespace="ns",node="node-1"} 150
# HELP kemu_vmi_migration_dirty_memory_rate_bytes Memory the guest dirties per second during the running outgoing migration.
# TYPE kemu_vmi_migration_dirty_memory_rate_bytes gauge
kemu_vmi_migration_dirty_memory_rate_bytes{name="vm",namespace="ns",node="node-1"} 8192
`},
		{name: "migration completed: no migration series", t: vm,
			s:     &rpc.StatsResponse{Migration: &rpc.MigrationState{Role: rpc.MigrationRole_Source, Status: "completed", BytesTransferred: 100}},
			names: []string{"kemu_vmi_migration_data_processed_bytes"}},
		{name: "a hostile guest's OS name is cut and made UTF-8",
			t:     Target{Namespace: "ns", Name: "vm", Info: Info{Phase: "Running", GuestOSName: strings.Repeat("é", 40) + "\xff", GuestOSMachine: "x86_64\xff"}},
			names: []string{"kemu_vmi_info"},
			want: `
# HELP kemu_vmi_info Information about a VMI running on this node (always 1): its phase, machine type and the guest OS its agent reports.
# TYPE kemu_vmi_info gauge
kemu_vmi_info{guest_os_kernel_release="",guest_os_machine="x86_64` + "\uFFFD" + `",guest_os_name="` + strings.Repeat("é", 32) + `",guest_os_version_id="",machine_type="",name="vm",namespace="ns",node="node-1",phase="Running"} 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names := tc.names
			if names == nil {
				names = []string{"kemu_vmi_info"}
			}
			if err := testutil.CollectAndCompare(emitOnly{tc.t, tc.s}, strings.NewReader(tc.want), names...); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestGuestLabel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Debian GNU/Linux", "Debian GNU/Linux"},
		{strings.Repeat("a", 70), strings.Repeat("a", 64)},
		{strings.Repeat("a", 63) + "é", strings.Repeat("a", 63)},
		{"bad\xffbyte", "bad\uFFFDbyte"},
	} {
		if got := guestLabel(tc.in); got != tc.want {
			t.Errorf("guestLabel(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Names lists each metric once, every one described.
func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range Names() {
		if seen[n] || !strings.HasPrefix(n, "kemu_") {
			t.Errorf("name %q duplicated or without kemu_", n)
		}
		seen[n] = true
	}
	if len(Names()) != len(allDescs) {
		t.Errorf("%d names, %d descriptions", len(Names()), len(allDescs))
	}
}
