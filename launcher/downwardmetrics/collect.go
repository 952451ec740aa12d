package downwardmetrics

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Static host figures, as KubeVirt reports them, but for kemu:
// HostSystemInfo "linux", VirtualizationVendor kemu's domain.
const (
	HostSystemInfo       = "linux"
	VirtualizationVendor = "kemu.dev"
)

// VM is what the launcher knows of its VM: the vCPUs' CPU time, the
// vCPUs online, and the guest's memory as the balloon has it.
type VM struct {
	CPUTime     time.Duration
	VCPUs       int
	MemoryBytes uint64
}

// Host reads the node's figures: /proc/stat, /proc/meminfo, /proc/vmstat
// and the CPU topology under /sys. Only the node's totals: nothing of
// other VMs or processes.
type Host struct {
	// NodeName is HostName (KubeVirt reports the Kubernetes node's name,
	// never a host path or the kernel's host name).
	NodeName string
	// QEMUVersion is VirtProductInfo.
	QEMUVersion string
	// Proc and Sys are /proc and /sys ("" = those).
	Proc, Sys string
	// Now is the clock ("" = time.Now).
	Now func() time.Time
}

// userHZ is the unit of /proc/stat's times (USER_HZ, 100 on Linux).
const userHZ = 100

func intMetric(ctx, name, unit string, v int64) Metric {
	return Metric{Type: "int64", Context: ctx, Name: name, Unit: unit, Value: strconv.FormatInt(v, 10)}
}
func uintMetric(ctx, name, unit string, v uint64) Metric {
	return Metric{Type: "uint64", Context: ctx, Name: name, Unit: unit, Value: strconv.FormatUint(v, 10)}
}
func realMetric(ctx, name, unit string, v float64) Metric {
	return Metric{Type: "real64", Context: ctx, Name: name, Unit: unit, Value: fmt.Sprintf("%.6f", v)}
}
func stringMetric(ctx, name, v string) Metric {
	return Metric{Type: "string", Context: ctx, Name: name, Value: v}
}

// Collect is KubeVirt's list, in its order and units: the static host
// figures, the VM's CPU and memory, then the host's CPUs, CPU time,
// memory, paging and time. A host figure that cannot be read is left out
// (as KubeVirt does) and its error returned beside the rest.
func (h Host) Collect(vm VM) (*Metrics, error) {
	proc, sys, now := h.Proc, h.Sys, h.Now
	if proc == "" {
		proc = "/proc"
	}
	if sys == "" {
		sys = "/sys"
	}
	if now == nil {
		now = time.Now
	}
	m := &Metrics{Metrics: []Metric{
		stringMetric(ContextHost, "HostName", h.NodeName),
		stringMetric(ContextHost, "HostSystemInfo", HostSystemInfo),
		stringMetric(ContextHost, "VirtualizationVendor", VirtualizationVendor),
		stringMetric(ContextHost, "VirtProductInfo", h.QEMUVersion),
		realMetric(ContextVM, "TotalCPUTime", "s", vm.CPUTime.Seconds()),
		intMetric(ContextVM, "ResourceProcessorLimit", "", int64(vm.VCPUs)),
		uintMetric(ContextVM, "PhysicalMemoryAllocatedToVirtualSystem", "KiB", vm.MemoryBytes/1024),
		// No active ballooning: the balloon's size is the limit (KubeVirt's words).
		uintMetric(ContextVM, "ResourceMemoryLimit", "KiB", vm.MemoryBytes/1024),
	}}
	var errs []error
	if n, err := physicalCPUs(sys); err == nil {
		m.Metrics = append(m.Metrics, intMetric(ContextHost, "NumberOfPhysicalCPUs", "", int64(n)))
	} else {
		errs = append(errs, err)
	}
	if t, err := cpuTime(proc); err == nil {
		m.Metrics = append(m.Metrics, realMetric(ContextHost, "TotalCPUTime", "s", t))
	} else {
		errs = append(errs, err)
	}
	if mi, err := keyValues(filepath.Join(proc, "meminfo")); err == nil {
		free, swapFree, total, swapTotal := mi["MemFree"], mi["SwapFree"], mi["MemTotal"], mi["SwapTotal"]
		buffers, cached, swapCached := mi["Buffers"], mi["Cached"], mi["SwapCached"]
		m.Metrics = append(m.Metrics,
			uintMetric(ContextHost, "FreePhysicalMemory", "KiB", free),
			uintMetric(ContextHost, "FreeVirtualMemory", "KiB", free+swapFree),
			uintMetric(ContextHost, "MemoryAllocatedToVirtualServers", "KiB", sub(total, free+buffers+cached)),
			uintMetric(ContextHost, "UsedVirtualMemory", "KiB", sub(total+swapTotal, free+cached+buffers+swapCached)))
	} else {
		errs = append(errs, err)
	}
	if vs, err := keyValues(filepath.Join(proc, "vmstat")); err == nil {
		page := uint64(os.Getpagesize())
		m.Metrics = append(m.Metrics,
			uintMetric(ContextHost, "PagedInMemory", "KiB", vs["pswpin"]*page/1024),
			uintMetric(ContextHost, "PagedOutMemory", "KiB", vs["pswpout"]*page/1024))
	} else {
		errs = append(errs, err)
	}
	m.Metrics = append(m.Metrics, intMetric(ContextHost, "Time", "s", now().Unix()))
	if len(errs) > 0 {
		return m, fmt.Errorf("downwardmetrics: host figures left out: %w", errors.Join(errs...))
	}
	return m, nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// physicalCPUs counts the distinct physical package ids of the CPUs.
func physicalCPUs(sys string) (int, error) {
	files, err := filepath.Glob(filepath.Join(sys, "devices/system/cpu/cpu[0-9]*/topology/physical_package_id"))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("no CPU topology under %s", sys)
	}
	ids := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, fmt.Errorf("CPU topology: %w", err)
		}
		ids[strings.TrimSpace(string(b))] = true
	}
	return len(ids), nil
}

// cpuTime is the node's user, nice and system time in seconds (the "cpu"
// line of /proc/stat, KubeVirt's sum).
func cpuTime(proc string) (float64, error) {
	b, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		return 0, fmt.Errorf("CPU time: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[0] != "cpu" {
			continue
		}
		var sum uint64
		for _, s := range f[1:4] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("CPU time: %s: %w", filepath.Join(proc, "stat"), err)
			}
			sum += v
		}
		return float64(sum) / userHZ, nil
	}
	return 0, fmt.Errorf("CPU time: no cpu line in %s", filepath.Join(proc, "stat"))
}

// keyValues reads "key: value [kB]" (meminfo) or "key value" (vmstat)
// lines; values as they are written (meminfo's in KiB).
func keyValues(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	kv := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			kv[strings.TrimSuffix(f[0], ":")] = v
		}
	}
	return kv, nil
}
