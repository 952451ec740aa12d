package top

import (
	"errors"
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/subresources"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func i64(v int64) *int64 { return &v }

// sample is a stats reply at t0+at.
func sample(at time.Duration, vcpus int32, vcpuNanos int64, mod func(*subresources.VirtualMachineInstanceStats)) *subresources.VirtualMachineInstanceStats {
	s := &subresources.VirtualMachineInstanceStats{Time: metav1.NewMicroTime(t0.Add(at)),
		CPU: subresources.CPUStats{VCPUs: vcpus, VCPUNanoSeconds: vcpuNanos}}
	if mod != nil {
		mod(s)
	}
	return s
}

func withIO(rx, tx, rd, wr int64) func(*subresources.VirtualMachineInstanceStats) {
	return func(s *subresources.VirtualMachineInstanceStats) {
		s.Interfaces = []subresources.InterfaceStats{{Name: "default", RxBytes: rx, TxBytes: tx}, {Name: "second", RxBytes: rx, TxBytes: tx}}
		s.Drives = []subresources.DriveStats{{Name: "root", ReadBytes: rd, WriteBytes: wr}}
	}
}

func TestComputeRow(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after *subresources.VirtualMachineInstanceStats
		want          Row
		wantErr       string
		startedOver   bool
	}{{
		name:   "one vCPU busy half the window",
		before: sample(0, 1, 10e9, nil), after: sample(2*time.Second, 1, 11e9, nil),
		want: Row{CPUPercent: 50},
	}, {
		name:   "two vCPUs, one busy all the window",
		before: sample(0, 2, 0, nil), after: sample(4*time.Second, 2, 4e9, nil),
		want: Row{CPUPercent: 50},
	}, {
		name:   "idle",
		before: sample(0, 4, 7e9, nil), after: sample(time.Second, 4, 7e9, nil),
		want: Row{},
	}, {
		name:   "rates summed over interfaces and drives",
		before: sample(0, 1, 0, withIO(1000, 2000, 0, 0)), after: sample(2*time.Second, 1, 0, withIO(3000, 2100, 8192, 4096)),
		want: Row{NetRx: 2000, NetTx: 100, DiskRead: 4096, DiskWrite: 2048},
	}, {
		name:   "an interface or drive in one sample only does not count",
		before: sample(0, 1, 0, nil), after: sample(time.Second, 1, 0, withIO(1<<40, 1<<40, 1<<40, 1<<40)),
		want: Row{},
	}, {
		name:   "guest memory of the later sample",
		before: sample(0, 1, 0, nil),
		after: sample(time.Second, 1, 0, func(s *subresources.VirtualMachineInstanceStats) {
			s.Memory = subresources.MemoryStats{GuestUsedBytes: i64(100 << 20), GuestTotalBytes: i64(256 << 20)}
		}),
		want: Row{MemoryUsed: i64(100 << 20), MemoryTotal: i64(256 << 20)},
	}, {
		name:   "total without used: no memory",
		before: sample(0, 1, 0, nil),
		after: sample(time.Second, 1, 0, func(s *subresources.VirtualMachineInstanceStats) {
			s.Memory = subresources.MemoryStats{GuestTotalBytes: i64(256 << 20)}
		}),
		want: Row{},
	}, {
		name:   "vCPU time went back",
		before: sample(0, 1, 5e9, nil), after: sample(time.Second, 1, 1e9, nil),
		startedOver: true,
	}, {
		name:   "vCPU count changed",
		before: sample(0, 1, 0, nil), after: sample(time.Second, 2, 1e9, nil),
		startedOver: true,
	}, {
		name:   "network counter went back",
		before: sample(0, 1, 0, withIO(10, 10, 0, 0)), after: sample(time.Second, 1, 0, withIO(5, 10, 0, 0)),
		startedOver: true,
	}, {
		name:   "disk counter went back",
		before: sample(0, 1, 0, withIO(0, 0, 10, 10)), after: sample(time.Second, 1, 0, withIO(0, 0, 10, 9)),
		startedOver: true,
	}, {
		name:   "same time",
		before: sample(time.Second, 1, 0, nil), after: sample(time.Second, 1, 1, nil),
		wantErr: "the samples are not apart in time (2025-01-02 03:04:06 +0000 UTC, then 2025-01-02 03:04:06 +0000 UTC)",
	}, {
		name:   "no vCPU",
		before: sample(0, 0, 0, nil), after: sample(time.Second, 0, 0, nil),
		wantErr: "no vCPU reported",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ComputeRow("ns", "vm", tc.before, tc.after)
			switch {
			case tc.startedOver:
				if !errors.Is(err, ErrStartedOver) {
					t.Fatalf("err %v, want ErrStartedOver", err)
				}
				return
			case tc.wantErr != "":
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			tc.want.Namespace, tc.want.Name = "ns", "vm"
			if !rowsEqual(got, tc.want) {
				t.Errorf("got  %s\nwant %s", show(got), show(tc.want))
			}
		})
	}
}

func rowsEqual(a, b Row) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	eqp := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.Namespace == b.Namespace && a.Name == b.Name && near(a.CPUPercent, b.CPUPercent) &&
		eqp(a.MemoryUsed, b.MemoryUsed) && eqp(a.MemoryTotal, b.MemoryTotal) &&
		near(a.NetRx, b.NetRx) && near(a.NetTx, b.NetTx) && near(a.DiskRead, b.DiskRead) && near(a.DiskWrite, b.DiskWrite)
}

func show(r Row) string {
	return r.Namespace + "/" + r.Name + " " + Percent(r.CPUPercent) + " " + Memory(r.MemoryUsed, r.MemoryTotal) + " " +
		Bytes(r.NetRx) + " " + Bytes(r.NetTx) + " " + Bytes(r.DiskRead) + " " + Bytes(r.DiskWrite)
}
