//go:build cluster

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
)

// TestServe runs two kemu-controller instances against a real
// kube-apiserver: the first takes the Lease, is ready, serves metrics and
// creates a VMI's launcher Pod; the second stays unready (not leading);
// when the first stops (graceful, releasing the Lease) the second leads.
func TestServe(t *testing.T) {
	c, err := cluster.Start(context.Background(), cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err) // no binaries: run make k8s
	}
	defer c.Stop()
	if err := c.InstallCRDs(); err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kemu-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := func(id string) (addr string, stop func() error) {
		o, err := parseFlags([]string{"--kubeconfig=" + c.Kubeconfig, "--launcher-image=kemu.local/launcher:1",
			"--metrics-addr=127.0.0.1:0", "--leader-elect-identity=" + id,
			"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"})
		if err != nil {
			t.Fatal(err)
		}
		addrs := make(chan string, 1)
		o.listening = func(a string) { addrs <- a }
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- serve(sctx, o) }()
		select {
		case addr = <-addrs:
		case err := <-done:
			t.Fatalf("serve %s: %v", id, err)
		case <-time.After(30 * time.Second):
			t.Fatal("no metrics server")
		}
		return addr, func() error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-time.After(30 * time.Second):
				return fmt.Errorf("%s did not stop", id)
			}
		}
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitReady := func(addr string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			code, _ := get("http://" + addr + "/readyz")
			return code == http.StatusOK, nil
		})
		if err != nil {
			t.Fatalf("%s never ready: %v", addr, err)
		}
	}

	addrA, stopA := start("a")
	waitReady(addrA)
	if code, _ := get("http://" + addrA + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	addrB, stopB := start("b")
	defer stopB() //nolint:errcheck
	if code, _ := get("http://" + addrB + "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("the second instance is ready without the Lease: %d", code)
	}
	if code, _ := get("http://" + addrB + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz of the standby %d", code)
	}
	lease, err := kube.CoordinationV1().Leases("kemu-system").Get(ctx, "kemu-controller", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "a" {
		t.Fatalf("lease %+v, %v", lease, err)
	}

	// The leader works: a VMI gets its Pod and reaches Scheduling.
	mem := resource.MustParse("64Mi")
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm1"}, Spec: v1.VirtualMachineInstanceSpec{
		Domain:  v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}},
		Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/disk:1"}}},
	}}
	if _, err := kemu.KemuV1alpha1().VirtualMachineInstances("default").Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		v, err := kemu.KemuV1alpha1().VirtualMachineInstances("default").Get(ctx, "vm1", metav1.GetOptions{})
		return err == nil && v.Status.Phase == v1.Scheduling, nil
	})
	if err != nil {
		t.Fatalf("the VMI did not reach Scheduling: %v", err)
	}
	_, body := get("http://" + addrA + "/metrics")
	for _, want := range []string{
		`kemu_vmi_phase_transition_time_from_creation_seconds_count{phase="Scheduling"}`,
		`workqueue_adds_total{name="vmi"}`, `workqueue_depth{name="vmi"}`, `workqueue_work_duration_seconds_count{name="vmi"}`,
		`workqueue_queue_duration_seconds_count{name="vmi"}`, `workqueue_retries_total{name="vmi"}`,
		`kemu_controller_launcher_pod_creations_total{result="success"}`, "go_goroutines",
		`kemu_vmi_phase_count{node="",phase="Scheduling"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// promtool's lint passes but for the one name kemu keeps from KubeVirt
	// (kubevirt_vmi_phase_count: a gauge ending in _count).
	promtool := exec.Command(filepath.Join("..", "..", "_out", "tools", "bin", "promtool"), "check", "metrics")
	promtool.Stdin = strings.NewReader(body)
	if out, err := promtool.CombinedOutput(); err != nil {
		const kept = `kemu_vmi_phase_count non-histogram and non-summary metrics should not have "_count" suffix`
		if promtool.ProcessState == nil || promtool.ProcessState.ExitCode() != 3 || strings.TrimSpace(string(out)) != kept {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}

	// Graceful stop releases the Lease; the standby takes over.
	if err := stopA(); err != nil {
		t.Fatalf("stopping the leader: %v", err)
	}
	waitReady(addrB)
	lease, err = kube.CoordinationV1().Leases("kemu-system").Get(ctx, "kemu-controller", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "b" {
		t.Fatalf("lease after the handover %+v, %v", lease, err)
	}
}
