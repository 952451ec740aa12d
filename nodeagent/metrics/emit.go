package metrics

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/qmp"
)

// maxLabelLen bounds a label value the guest chose (its OS name, version,
// kernel release, machine).
const maxLabelLen = 64

// pageSize is the x86 target page QEMU's dirty-pages-rate counts in.
const pageSize = 4096

// emit sends a target's series: kemu_vmi_info always, the rest only with
// figures (s nil: the launcher did not answer).
func emit(ch chan<- prometheus.Metric, node string, t Target, s *rpc.StatsResponse) {
	lv := []string{t.Namespace, t.Name, node}
	with := func(extra ...string) []string { return append(append([]string(nil), lv...), extra...) }
	gauge := func(d *prometheus.Desc, v float64, labels []string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels []string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	i := t.Info
	gauge(infoDesc, 1, with(i.Phase, i.MachineType, guestLabel(i.GuestOSName), guestLabel(i.GuestOSVersionID),
		guestLabel(i.GuestOSKernelRelease), guestLabel(i.GuestOSMachine)))
	if s == nil {
		return
	}
	if s.QemuCpuTimeNanos > 0 {
		counter(cpuUsageDesc, seconds(s.QemuCpuTimeNanos), lv)
	}
	for _, v := range s.Vcpus {
		id := with(strconv.Itoa(int(v.Index)))
		counter(vcpuDesc, seconds(v.CpuTimeNanos), id)
		if v.DelayNanos != nil {
			counter(vcpuDelayDesc, seconds(*v.DelayNanos), id)
		}
	}
	if s.QemuRssBytes > 0 {
		gauge(residentDesc, float64(s.QemuRssBytes), lv)
	}
	if s.BalloonActualBytes > 0 {
		gauge(balloonDesc, float64(s.BalloonActualBytes), lv)
	}
	emitGuestMemory(s.GuestMemory, gauge, counter, lv)
	for _, n := range s.Interfaces {
		l := with(n.Name)
		counter(rxBytesDesc, float64(n.RxBytes), l)
		counter(txBytesDesc, float64(n.TxBytes), l)
		counter(rxPacketsDesc, float64(n.RxPackets), l)
		counter(txPacketsDesc, float64(n.TxPackets), l)
		counter(rxErrorsDesc, float64(n.RxErrors), l)
		counter(txErrorsDesc, float64(n.TxErrors), l)
		counter(rxDropDesc, float64(n.RxDropped), l)
		counter(txDropDesc, float64(n.TxDropped), l)
	}
	for _, b := range s.Blocks {
		if b.Drive == "" {
			continue // firmware, no disk of the VMI
		}
		l := with(b.Drive)
		counter(rdBytesDesc, float64(b.RdBytes), l)
		counter(wrBytesDesc, float64(b.WrBytes), l)
		counter(rdOpsDesc, float64(b.RdOperations), l)
		counter(wrOpsDesc, float64(b.WrOperations), l)
		counter(rdTimeDesc, seconds(b.RdTotalTimeNanos), l)
		counter(wrTimeDesc, seconds(b.WrTotalTimeNanos), l)
		counter(flushOpsDesc, float64(b.FlushOperations), l)
		counter(flushTimesDesc, seconds(b.FlushTotalTimeNanos), l)
	}
	if m := s.Migration; m != nil && m.Role == rpc.MigrationRole_Source && qmp.MigrationStatusMoving(m.Status) {
		gauge(migProcessedDesc, float64(m.BytesTransferred), lv)
		gauge(migRemainingDesc, float64(m.BytesRemaining), lv)
		gauge(migTotalDesc, float64(m.BytesTotal), lv)
		gauge(migDirtyDesc, float64(m.DirtyPagesRate*pageSize), lv)
	}
}

// emitGuestMemory sends the balloon driver's figures it reported.
func emitGuestMemory(g *rpc.GuestMemoryStats, gauge, counter func(*prometheus.Desc, float64, []string), lv []string) {
	if g == nil {
		return
	}
	opt := func(f func(*prometheus.Desc, float64, []string), d *prometheus.Desc, v *int64) {
		if v != nil {
			f(d, float64(*v), lv)
		}
	}
	opt(gauge, availableDesc, g.TotalBytes)
	opt(gauge, usableDesc, g.AvailableBytes)
	opt(gauge, unusedDesc, g.FreeBytes)
	opt(gauge, cachedDesc, g.DiskCachesBytes)
	if g.TotalBytes != nil && g.FreeBytes != nil {
		gauge(usedDesc, float64(*g.TotalBytes-*g.FreeBytes), lv)
	}
	opt(counter, swapInDesc, g.SwapInBytes)
	opt(counter, swapOutDesc, g.SwapOutBytes)
	opt(counter, majFaultDesc, g.MajorFaults)
	opt(counter, minFaultDesc, g.MinorFaults)
}

func seconds(nanos int64) float64 { return time.Duration(nanos).Seconds() }

// guestLabel is a label value from the guest: valid UTF-8, at most
// maxLabelLen bytes.
func guestLabel(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxLabelLen {
		return s
	}
	s = s[:maxLabelLen]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
