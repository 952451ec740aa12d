//go:build cluster

package top

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/apiserver/apiservertest"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/cli/clitest"
	"github.com/kemu-dev/kemu/kube/nodeapi"
	"github.com/kemu-dev/kemu/test/cluster"
)

// standInNodes answers stats as a node agent would (test/nodeapi proves
// the real one's figures; the e2e suite the whole path): VMI "busy" has
// two vCPUs, one of them always busy, receives 10 KiB/s, writes 1 MiB/s
// and reports its guest memory; "quiet" reports no guest memory; any
// other VMI's node agent fails. What this test proves is kemuctl's side
// through a real kube-apiserver and kemu-api.
type standInNodes struct{ start time.Time }

func (standInNodes) Stream(context.Context, *v1.VirtualMachineInstance, string) (io.ReadWriteCloser, error) {
	return nil, apierrors.NewServiceUnavailable("no streams here")
}

func (n standInNodes) Get(_ context.Context, vmi *v1.VirtualMachineInstance, verb string, out any) error {
	st, ok := out.(*subresources.VirtualMachineInstanceStats)
	if verb != nodeapi.Stats || !ok {
		return apierrors.NewServiceUnavailable("only stats here")
	}
	now := time.Now()
	el := now.Sub(n.start)
	*st = subresources.VirtualMachineInstanceStats{Time: metav1.NewMicroTime(now), CPU: subresources.CPUStats{VCPUs: 2}}
	switch vmi.Name {
	case "busy":
		used, total := int64(100<<20), int64(256<<20)
		st.CPU.VCPUNanoSeconds = int64(el)
		st.Memory = subresources.MemoryStats{GuestUsedBytes: &used, GuestTotalBytes: &total}
		st.Interfaces = []subresources.InterfaceStats{{Name: "default", RxBytes: int64(el.Seconds() * 10 * 1024)}}
		st.Drives = []subresources.DriveStats{{Name: "root", WriteBytes: int64(el.Seconds() * (1 << 20))}}
	case "quiet":
	default:
		return apierrors.NewServiceUnavailable("node agent on node1: the launcher is gone")
	}
	return nil
}

// TestTopVMI runs kemuctl top vmi through a real kube-apiserver and
// kemu-api in process, with the node agents stood in for. Needs make k8s.
func TestTopVMI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("%v (run make k8s)", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if err := c.InstallCRDs(); err != nil {
		t.Fatal(err)
	}
	in, err := apiservertest.Start(ctx, c, apiservertest.Options{Nodes: standInNodes{start: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Stop(); err != nil {
			t.Error(err)
		}
	})
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	if _, err := kubernetes.NewForConfigOrDie(c.RESTConfig()).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createVMI(ctx, t, kemu, "default", "busy", v1.Running)
	createVMI(ctx, t, kemu, "default", "broken", v1.Running)
	createVMI(ctx, t, kemu, "default", "pending", v1.Scheduled)
	createVMI(ctx, t, kemu, "other", "quiet", v1.Running)

	run := func(args ...string) (string, string, int) {
		c1 := cli.NewCluster()
		return clitest.Run(t, cli.Root(cli.Name, c1, NewCommand(c1)), "", append(args, "--kubeconfig", c.Kubeconfig)...)
	}
	for _, tc := range []struct {
		name         string
		args         []string
		code         int
		stdout       string
		stderrHas    []string
		stderrHasNot string
	}{{
		name: "a namespace: a row for the VMI measured, the others said",
		args: []string{"top", "vmi", "-n", "default", "--window", "1s"},
		stdout: `NAME   CPU(%)   MEMORY(used/total)   NET RX/s   NET TX/s   DISK READ/s   DISK WRITE/s
busy   50%      100MiB/256MiB        10KiB      0B         0B            1.0MiB
`,
		stderrHas: []string{"kemuctl top vmi: 1 VMI(s) not Running skipped",
			"kemuctl top vmi: VMI default/broken: node agent on node1: the launcher is gone"},
	}, {
		name: "all namespaces, by memory, no headers",
		args: []string{"top", "vmis", "-A", "--no-headers", "--sort-by=memory", "--window=500ms"},
		stdout: `default   busy    50%   100MiB/256MiB   10KiB   0B   0B   1.0MiB
other     quiet   0%    -               0B      0B   0B   0B
`,
		stderrHas: []string{"1 VMI(s) not Running skipped", "VMI default/broken:"},
	}, {
		name:         "named",
		args:         []string{"top", "vmi", "quiet", "-n", "other"},
		stdout:       "NAME    CPU(%)   MEMORY(used/total)   NET RX/s   NET TX/s   DISK READ/s   DISK WRITE/s\nquiet   0%       -                    0B         0B         0B            0B\n",
		stderrHasNot: "skipped",
	}, {
		name:      "every VMI fails: exit 1",
		args:      []string{"top", "vmi", "broken", "nosuch"},
		code:      1,
		stderrHas: []string{"VMI default/broken: node agent on node1", "VMI default/nosuch not found"},
	}, {
		name:      "only VMIs not running: nothing to measure, no failure",
		args:      []string{"top", "vmi", "pending"},
		stderrHas: []string{"1 VMI(s) not Running skipped"},
	}, {
		name:      "no VMIs",
		args:      []string{"top", "vmi", "-n", "kube-public"},
		stderrHas: []string{"No VMIs found in kube-public namespace."},
	}, {
		name:      "a name across namespaces",
		args:      []string{"top", "vmi", "-A", "busy"},
		code:      2,
		stderrHas: []string{"a VMI cannot be named across all namespaces"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(tc.args...)
			if code != tc.code || stdout != tc.stdout {
				t.Errorf("exit %d, stdout\n%s\nwant exit %d, stdout\n%s\nstderr: %s", code, stdout, tc.code, tc.stdout, stderr)
			}
			for _, s := range tc.stderrHas {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr %q, want %q in it", stderr, s)
				}
			}
			if tc.stderrHasNot != "" && strings.Contains(stderr, tc.stderrHasNot) {
				t.Errorf("stderr %q has %q", stderr, tc.stderrHasNot)
			}
		})
	}
}

// createVMI creates a minimal VMI with phase (and node1 as its node).
func createVMI(ctx context.Context, t *testing.T, kemu versioned.Interface, ns, name string, phase v1.VirtualMachineInstancePhase) {
	t.Helper()
	mem := resource.MustParse("128Mi")
	vmis := kemu.KemuV1alpha1().VirtualMachineInstances(ns)
	vmi, err := vmis.Create(ctx, &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain:  v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}},
			Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/cirros:6.2"}}},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vmi.Status = v1.VirtualMachineInstanceStatus{Phase: phase, NodeName: "node1"}
	if _, err := vmis.UpdateStatus(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
