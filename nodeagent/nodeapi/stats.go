package nodeapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/kube/nodeapi"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/vmi"
)

// serveStats answers stats with the launcher's GetStats of now, within
// CallTimeout. Fresh on purpose, not nodeagent/metrics' cached figures:
// kemuctl top takes two samples a window of seconds apart and divides
// their difference by the time between them, which a cache of 5 s would
// turn into zero or into the time of a sample nobody knows. No guest
// agent is needed (QEMU, /proc and the taps answer).
func (s *Server) serveStats(w http.ResponseWriter, r *http.Request, l vmi.APILauncher) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CallTimeout)
	defer cancel()
	st, err := l.Client.GetStats(ctx, &rpc.Empty{})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("GetStats failed", "err", err)
		writeRPCError(w, nodeapi.Stats, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Stats(st, time.Now()))
}

// Stats is stats' body from the launcher's GetStats, taken at now: the
// one place the launcher's figures become the API's. Figures the launcher
// leaves unset (or negative) are absent; the guest's memory figures are
// the guest's word, so used is clamped to [0, total].
func Stats(in *rpc.StatsResponse, now time.Time) *subresources.VirtualMachineInstanceStats {
	out := &subresources.VirtualMachineInstanceStats{
		TypeMeta:   metav1.TypeMeta{Kind: subresources.StatsKind, APIVersion: subresources.GroupVersion},
		Time:       metav1.NewMicroTime(now),
		Interfaces: []subresources.InterfaceStats{},
		Drives:     []subresources.DriveStats{},
	}
	out.CPU.UsageCoreNanoSeconds = positive(in.GetQemuCpuTimeNanos())
	for _, v := range in.GetVcpus() {
		out.CPU.VCPUs++
		out.CPU.VCPUNanoSeconds += max(v.GetCpuTimeNanos(), 0)
	}
	m := &out.Memory
	m.BalloonActualBytes = positive(in.GetBalloonActualBytes())
	m.QEMUResidentBytes = positive(in.GetQemuRssBytes())
	if g := in.GetGuestMemory(); g != nil {
		m.GuestTotalBytes = nonNegative(g.TotalBytes)
		m.GuestAvailableBytes = nonNegative(g.AvailableBytes)
		m.GuestFreeBytes = nonNegative(g.FreeBytes)
		if m.GuestTotalBytes != nil && m.GuestFreeBytes != nil {
			used := min(max(*m.GuestTotalBytes-*m.GuestFreeBytes, 0), *m.GuestTotalBytes)
			m.GuestUsedBytes = &used
		}
		if u := g.GetLastUpdateUnix(); u > 0 {
			t := metav1.Unix(u, 0)
			m.GuestUpdateTime = &t
		}
	}
	for _, n := range in.GetInterfaces() {
		out.Interfaces = append(out.Interfaces, subresources.InterfaceStats{Name: n.GetName(),
			RxBytes: n.GetRxBytes(), RxPackets: n.GetRxPackets(), TxBytes: n.GetTxBytes(), TxPackets: n.GetTxPackets()})
	}
	seen := map[string]bool{}
	for _, b := range in.GetBlocks() {
		if b.GetDrive() == "" || seen[b.GetDrive()] {
			continue // the firmware's flash, or a drive listed already
		}
		seen[b.GetDrive()] = true
		out.Drives = append(out.Drives, subresources.DriveStats{Name: b.GetDrive(),
			ReadBytes: b.GetRdBytes(), ReadOps: b.GetRdOperations(), WriteBytes: b.GetWrBytes(), WriteOps: b.GetWrOperations()})
	}
	return out
}

// positive is v, or nil when it is not above 0 (the launcher's "unknown").
func positive(v int64) *int64 {
	if v <= 0 {
		return nil
	}
	return &v
}

// nonNegative is v, or nil when unset or negative.
func nonNegative(v *int64) *int64 {
	if v == nil || *v < 0 {
		return nil
	}
	c := *v
	return &c
}
