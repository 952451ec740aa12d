package nodeapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

func ptr(v int64) *int64 { return &v }

func TestStats(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 678901000, time.UTC)
	for _, tc := range []struct {
		name string
		in   *rpc.StatsResponse
		want string
	}{{
		name: "nothing known",
		in:   &rpc.StatsResponse{},
		want: `{"kind":"VirtualMachineInstanceStats","apiVersion":"subresources.kemu.dev/v1alpha1","time":"2025-01-02T03:04:05.678901Z",` +
			`"cpu":{"vcpus":0,"vcpuNanoSeconds":0},"memory":{},"interfaces":[],"drives":[]}`,
	}, {
		name: "every figure",
		in: &rpc.StatsResponse{
			QemuCpuTimeNanos: 9_000, QemuRssBytes: 300 << 20, BalloonActualBytes: 256 << 20,
			Vcpus:       []*rpc.VCPU{{Index: 0, CpuTimeNanos: 1_000}, {Index: 1, CpuTimeNanos: 2_500}},
			GuestMemory: &rpc.GuestMemoryStats{TotalBytes: ptr(1000), FreeBytes: ptr(400), AvailableBytes: ptr(700), LastUpdateUnix: 1735787045},
			Interfaces:  []*rpc.InterfaceStat{{Name: "default", RxBytes: 10, RxPackets: 1, TxBytes: 20, TxPackets: 2, RxErrors: 5}},
			Blocks: []*rpc.BlockStat{
				{NodeName: "pflash0", RdBytes: 99}, // firmware: no drive
				{Drive: "root", NodeName: "root-fmt", RdBytes: 4096, RdOperations: 1, WrBytes: 512, WrOperations: 2},
				{Drive: "root", NodeName: "root-file", RdBytes: 1 << 40}, // listed already
			},
		},
		want: `{"kind":"VirtualMachineInstanceStats","apiVersion":"subresources.kemu.dev/v1alpha1","time":"2025-01-02T03:04:05.678901Z",` +
			`"cpu":{"usageCoreNanoSeconds":9000,"vcpus":2,"vcpuNanoSeconds":3500},` +
			`"memory":{"guestTotalBytes":1000,"guestAvailableBytes":700,"guestFreeBytes":400,"guestUsedBytes":600,"guestUpdateTime":"2025-01-02T03:04:05Z","balloonActualBytes":268435456,"qemuResidentBytes":314572800},` +
			`"interfaces":[{"name":"default","rxBytes":10,"rxPackets":1,"txBytes":20,"txPackets":2}],` +
			`"drives":[{"name":"root","readBytes":4096,"readOps":1,"writeBytes":512,"writeOps":2}]}`,
	}, {
		name: "a guest reporting more free than total, a negative vCPU time",
		in: &rpc.StatsResponse{
			Vcpus:       []*rpc.VCPU{{CpuTimeNanos: -5}},
			GuestMemory: &rpc.GuestMemoryStats{TotalBytes: ptr(1000), FreeBytes: ptr(5000), AvailableBytes: ptr(-1)},
		},
		want: `{"kind":"VirtualMachineInstanceStats","apiVersion":"subresources.kemu.dev/v1alpha1","time":"2025-01-02T03:04:05.678901Z",` +
			`"cpu":{"vcpus":1,"vcpuNanoSeconds":0},"memory":{"guestTotalBytes":1000,"guestFreeBytes":5000,"guestUsedBytes":0},"interfaces":[],"drives":[]}`,
	}, {
		name: "free without total: no used",
		in:   &rpc.StatsResponse{GuestMemory: &rpc.GuestMemoryStats{FreeBytes: ptr(5)}},
		want: `{"kind":"VirtualMachineInstanceStats","apiVersion":"subresources.kemu.dev/v1alpha1","time":"2025-01-02T03:04:05.678901Z",` +
			`"cpu":{"vcpus":0,"vcpuNanoSeconds":0},"memory":{"guestFreeBytes":5},"interfaces":[],"drives":[]}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(Stats(tc.in, now))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			var back subresources.VirtualMachineInstanceStats
			if err := json.Unmarshal(got, &back); err != nil || !back.Time.Time.Equal(now) {
				t.Errorf("read back: %v, time %v", err, back.Time)
			}
		})
	}
}
