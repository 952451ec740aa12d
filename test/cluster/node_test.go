//go:build cluster

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/test/cluster"
)

// TestNode starts a control plane with a real node (containerd, runc, CNI
// bridge, kube-scheduler, kubelet), runs a Pod from a pre-imported image that
// writes into an emptyDir, finds the file through the kubelet root on the
// host, reads the Pod's log through the apiserver, deletes the Pod, and
// checks that Stop leaves no process, mount or folder of the node behind.
func TestNode(t *testing.T) {
	c, err := cluster.Start(context.Background(), cluster.Options{Node: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	t.Logf("control plane + node up in %s (node: containerd to Ready %s; waited %s for the node lock), RSS %v",
		c.StartupDuration.Round(time.Millisecond), c.NodeStartupDuration.Round(time.Millisecond),
		c.NodeLockWait.Round(time.Millisecond), mib(c.RSS()))
	if _, err := os.Stat(filepath.Join(c.DevicePluginDir, "kubelet.sock")); err != nil {
		t.Errorf("kubelet registration socket: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	// Only one node per machine: a second one gives up waiting for the lock.
	t.Run("second node waits for the lock", func(t *testing.T) {
		_, err := cluster.Start(ctx, cluster.Options{Node: true, NodeLockTimeout: 500 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "still held") {
			t.Fatalf("second node start: want a lock timeout, got %v", err)
		}
	})

	const marker = "hello from the pod"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(5)),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           cluster.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c",
					"trap 'exit 0' TERM; echo '" + marker + "' > /data/hello && echo wrote /data/hello; sleep 3600 & wait"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	t0 := time.Now()
	pod, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitPod(ctx, cs, "default", pod.Name, func(p *corev1.Pod) (bool, error) {
		return p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		t.Fatalf("%v\n--- kubelet ---\n%s", err, c.Logs("kubelet", 30))
	}
	t.Logf("pod Running %s after create", time.Since(t0).Round(time.Millisecond))

	// The emptyDir is a folder under the kubelet root on the host.
	hostFile := filepath.Join(c.KubeletRootDir, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "data", "hello")
	var got []byte
	if err := cluster.Poll(ctx, func() error {
		got, err = os.ReadFile(hostFile)
		return err
	}); err != nil {
		t.Fatalf("file written in the pod's emptyDir not on the host: %v", err)
	}
	if strings.TrimSpace(string(got)) != marker {
		t.Errorf("%s = %q, want %q", hostFile, got, marker)
	}

	if err := cluster.Poll(ctx, func() error {
		out, _, err := c.Kubectl("logs", pod.Name)
		if err == nil && !strings.Contains(out, "wrote /data/hello") {
			err = fmt.Errorf("log %q", out)
		}
		return err
	}); err != nil {
		t.Errorf("kubectl logs: %v", err)
	}

	t0 = time.Now()
	if _, _, err := c.Kubectl("delete", "pod", pod.Name, "--wait=true", "--timeout=90s"); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod deleted in %s", time.Since(t0).Round(time.Millisecond))
	podDir := filepath.Join(c.KubeletRootDir, "pods", string(pod.UID))
	if err := cluster.Poll(ctx, func() error {
		if _, err := os.Stat(podDir); err == nil {
			return fmt.Errorf("%s still exists", podDir)
		}
		return nil
	}); err != nil {
		t.Errorf("kubelet did not clean up the pod's folder: %v", err)
	}

	procs := c.Processes()
	t0 = time.Now()
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop took %s", time.Since(t0).Round(time.Millisecond))
	for _, p := range procs {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.Pid)); err == nil {
			t.Errorf("%s (pid %d) still exists after Stop", p.Name, p.Pid)
		}
	}
	// containerd's shims name the cluster folder in their -address.
	if left := processesMentioning(c.Dir); len(left) > 0 {
		t.Errorf("processes still running with %s in their command line: %v", c.Dir, left)
	}
	if m := cluster.MountsUnder(c.Dir); len(m) > 0 {
		t.Errorf("still mounted after Stop: %v", m)
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s not removed: %v", c.Dir, err)
	}
}

// waitPod polls the Pod until cond says done, it fails, or ctx ends.
func waitPod(ctx context.Context, cs kubernetes.Interface, ns, name string, cond func(*corev1.Pod) (bool, error)) error {
	var last string
	err := cluster.Poll(ctx, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		last = podSummary(p)
		done, err := cond(p)
		if err != nil {
			return cluster.StopPolling{Err: err}
		}
		if !done {
			return errors.New(last)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w (last: %s)", ns, name, err, last)
	}
	return nil
}

func podSummary(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			fmt.Fprintf(&b, "; %s: %s", c.Type, c.Message)
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			fmt.Fprintf(&b, "; %s waiting: %s %s", s.Name, w.Reason, w.Message)
		}
	}
	for _, e := range p.Status.InitContainerStatuses {
		fmt.Fprintf(&b, "; init %s ready=%v", e.Name, e.Ready)
	}
	return b.String()
}
