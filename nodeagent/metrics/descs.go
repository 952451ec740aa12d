package metrics

import "github.com/prometheus/client_golang/prometheus"

// Labels of every kemu_vmi_* series, and the bounded extra ones (each
// bounded by the VMI's spec: vCPUs, interfaces, disks).
const (
	LabelNamespace = "namespace"
	LabelName      = "name"
	LabelNode      = "node"
	LabelVCPU      = "id"
	LabelInterface = "interface"
	LabelDrive     = "drive"
)

var (
	base         = []string{LabelNamespace, LabelName, LabelNode}
	withVCPU     = append(append([]string(nil), base...), LabelVCPU)
	withIface    = append(append([]string(nil), base...), LabelInterface)
	withDrive    = append(append([]string(nil), base...), LabelDrive)
	infoLabels   = append(append([]string(nil), base...), "phase", "machine_type", "guest_os_name", "guest_os_version_id", "guest_os_kernel_release", "guest_os_machine")
	migrationLbl = base
)

// names are the metrics' names, in the order of their definition.
var names []string

func desc(name, help string, labels []string) *prometheus.Desc {
	names = append(names, name)
	return prometheus.NewDesc(name, help, labels, nil)
}

// Names are the names of the metrics the Collector exports.
func Names() []string { return append([]string(nil), names...) }

// The metrics. Counters end in _total, sizes are bytes, times seconds.
var (
	infoDesc = desc("kemu_vmi_info", "Information about a VMI running on this node (always 1): its phase, machine type and the guest OS its agent reports.", infoLabels)

	cpuUsageDesc  = desc("kemu_vmi_cpu_usage_seconds_total", "CPU time used by all of the VM's QEMU threads (vCPUs, I/O, emulation), from QEMU's cgroup.", base)
	vcpuDesc      = desc("kemu_vmi_vcpu_seconds_total", "CPU time used by each vCPU thread.", withVCPU)
	vcpuDelayDesc = desc("kemu_vmi_vcpu_delay_seconds_total", "Time each vCPU thread waited on a host run queue, ready to run.", withVCPU)
	residentDesc  = desc("kemu_vmi_memory_resident_bytes", "Resident memory of the VM's QEMU process.", base)
	balloonDesc   = desc("kemu_vmi_memory_actual_balloon_bytes", "The guest's current memory as the balloon sets it.", base)
	availableDesc = desc("kemu_vmi_memory_available_bytes", "Memory the guest sees in all (its balloon driver's total memory).", base)
	usableDesc    = desc("kemu_vmi_memory_usable_bytes", "Memory the guest could use without swapping (its balloon driver's available memory).", base)
	unusedDesc    = desc("kemu_vmi_memory_unused_bytes", "Memory the guest leaves unused (its balloon driver's free memory).", base)
	usedDesc      = desc("kemu_vmi_memory_used_bytes", "Memory the guest uses: its total less its free memory.", base)
	cachedDesc    = desc("kemu_vmi_memory_cached_bytes", "Memory the guest uses for disk caches.", base)
	swapInDesc    = desc("kemu_vmi_memory_swap_in_traffic_bytes_total", "Memory the guest swapped in.", base)
	swapOutDesc   = desc("kemu_vmi_memory_swap_out_traffic_bytes_total", "Memory the guest swapped out.", base)
	majFaultDesc  = desc("kemu_vmi_memory_pgmajfault_total", "Major page faults in the guest.", base)
	minFaultDesc  = desc("kemu_vmi_memory_pgminfault_total", "Minor page faults in the guest.", base)

	rxBytesDesc   = desc("kemu_vmi_network_receive_bytes_total", "Bytes the guest received on an interface.", withIface)
	txBytesDesc   = desc("kemu_vmi_network_transmit_bytes_total", "Bytes the guest transmitted on an interface.", withIface)
	rxPacketsDesc = desc("kemu_vmi_network_receive_packets_total", "Packets the guest received on an interface.", withIface)
	txPacketsDesc = desc("kemu_vmi_network_transmit_packets_total", "Packets the guest transmitted on an interface.", withIface)
	rxErrorsDesc  = desc("kemu_vmi_network_receive_errors_total", "Receive errors on an interface.", withIface)
	txErrorsDesc  = desc("kemu_vmi_network_transmit_errors_total", "Transmit errors on an interface.", withIface)
	rxDropDesc    = desc("kemu_vmi_network_receive_packets_dropped_total", "Packets dropped on their way to the guest on an interface.", withIface)
	txDropDesc    = desc("kemu_vmi_network_transmit_packets_dropped_total", "Packets from the guest dropped on an interface.", withIface)

	rdBytesDesc    = desc("kemu_vmi_storage_read_traffic_bytes_total", "Bytes read from a drive.", withDrive)
	wrBytesDesc    = desc("kemu_vmi_storage_write_traffic_bytes_total", "Bytes written to a drive.", withDrive)
	rdOpsDesc      = desc("kemu_vmi_storage_iops_read_total", "Read operations on a drive.", withDrive)
	wrOpsDesc      = desc("kemu_vmi_storage_iops_write_total", "Write operations on a drive.", withDrive)
	rdTimeDesc     = desc("kemu_vmi_storage_read_times_seconds_total", "Time spent on reads from a drive.", withDrive)
	wrTimeDesc     = desc("kemu_vmi_storage_write_times_seconds_total", "Time spent on writes to a drive.", withDrive)
	flushOpsDesc   = desc("kemu_vmi_storage_flush_requests_total", "Flush operations on a drive.", withDrive)
	flushTimesDesc = desc("kemu_vmi_storage_flush_times_seconds_total", "Time spent on flushes of a drive.", withDrive)

	migProcessedDesc = desc("kemu_vmi_migration_data_processed_bytes", "Memory the running outgoing migration sent so far.", migrationLbl)
	migRemainingDesc = desc("kemu_vmi_migration_data_remaining_bytes", "Memory the running outgoing migration has still to send.", migrationLbl)
	migTotalDesc     = desc("kemu_vmi_migration_data_total_bytes", "Memory the running outgoing migration moves in all.", migrationLbl)
	migDirtyDesc     = desc("kemu_vmi_migration_dirty_memory_rate_bytes", "Memory the guest dirties per second during the running outgoing migration.", migrationLbl)

	statsErrorsDesc = desc("kemu_nodeagent_vmi_stats_errors_total", "GetStats calls to launchers for the VMI metrics that failed or timed out.", nil)
)

var allDescs = []*prometheus.Desc{infoDesc, cpuUsageDesc, vcpuDesc, vcpuDelayDesc, residentDesc, balloonDesc, availableDesc, usableDesc,
	unusedDesc, usedDesc, cachedDesc, swapInDesc, swapOutDesc, majFaultDesc, minFaultDesc,
	rxBytesDesc, txBytesDesc, rxPacketsDesc, txPacketsDesc, rxErrorsDesc, txErrorsDesc, rxDropDesc, txDropDesc,
	rdBytesDesc, wrBytesDesc, rdOpsDesc, wrOpsDesc, rdTimeDesc, wrTimeDesc, flushOpsDesc, flushTimesDesc,
	migProcessedDesc, migRemainingDesc, migTotalDesc, migDirtyDesc, statsErrorsDesc}
