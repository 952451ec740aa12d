//go:build cluster

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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

// TestNodes starts a control plane with two real nodes, each in its own
// namespaces (containerd, runc, CNI bridge, kubelet; kube-scheduler for
// both), and checks what makes them two machines: a Pod on each, the host
// and the other node's Pod reach a Pod's IP over TCP, an emptyDir file is
// found through its own node's kubelet root only, kubectl logs and exec
// reach each kubelet; a node that fails (Node.Stop) loses its Pods and
// comes back (Node.Start); Stop leaves no process, mount, cgroup, network
// device or folder behind.
func TestNodes(t *testing.T) {
	c, err := cluster.Start(context.Background(), cluster.Options{Nodes: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	t.Logf("control plane + 2 nodes up in %s (nodes: images to last Ready %s; waited %s for the node lock), RSS %v",
		c.StartupDuration.Round(time.Millisecond), c.NodeStartupDuration.Round(time.Millisecond),
		c.NodeLockWait.Round(time.Millisecond), mib(c.RSS()))
	a, b := c.Nodes[0], c.Nodes[1]
	for _, n := range c.Nodes {
		if _, err := os.Stat(filepath.Join(n.DevicePluginDir(), "kubelet.sock")); err != nil {
			t.Errorf("%s: kubelet registration socket: %v", n.Name, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ip string
		for _, ad := range node.Status.Addresses {
			if ad.Type == corev1.NodeInternalIP {
				ip = ad.Address
			}
		}
		if ip != n.IP {
			t.Errorf("node %s InternalIP %q, want %s", n.Name, ip, n.IP)
		}
	}

	// Only one cluster with nodes per machine: a second one gives up
	// waiting for the lock.
	t.Run("second cluster waits for the lock", func(t *testing.T) {
		_, err := cluster.Start(ctx, cluster.Options{Node: true, NodeLockTimeout: 500 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "still held") {
			t.Fatalf("second node start: want a lock timeout, got %v", err)
		}
	})

	const marker = "hello from the pod"
	server := busyboxPod("server", b.Name,
		"trap 'exit 0' TERM; mkdir -p /www; echo '"+marker+"' > /www/index.html; echo '"+marker+"' > /data/hello; echo wrote /data/hello; exec /bin/busybox httpd -f -p 8080 -h /www")
	client := busyboxPod("client", a.Name, "trap 'exit 0' TERM; sleep 3600 & wait")
	t0 := time.Now()
	for _, p := range []*corev1.Pod{server, client} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running := func(p *corev1.Pod) (bool, error) {
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
	}
	for _, p := range []*corev1.Pod{server, client} {
		if err := waitPod(ctx, cs, "default", p.Name, running); err != nil {
			t.Fatalf("%v\n--- kubelet of %s ---\n%s", err, p.Spec.NodeName, c.Node(p.Spec.NodeName).Logs("kubelet", 30))
		}
	}
	t.Logf("pods Running %s after create", time.Since(t0).Round(time.Millisecond))
	srv, err := cs.CoreV1().Pods("default").Get(ctx, "server", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(srv.Status.PodIP, strings.TrimSuffix(b.PodCIDR, "0/24")) {
		t.Errorf("server Pod IP %s is not in %s's range %s", srv.Status.PodIP, b.Name, b.PodCIDR)
	}

	// The host reaches the Pod on node B, and so does the Pod on node A
	// (through kubectl exec: the API server reaches node A's kubelet).
	url := "http://" + srv.Status.PodIP + ":8080/"
	if err := cluster.Poll(ctx, func() error { return httpGetContains(ctx, url, marker) }); err != nil {
		t.Errorf("host → Pod on %s: %v", b.Name, err)
	}
	if err := cluster.Poll(ctx, func() error {
		// (Debian's static busybox wget crashes with -T: the context bounds it.)
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, _, err := c.KubectlContext(ectx, nil, "exec", "client", "--", "/bin/busybox", "wget", "-q", "-O", "-", url)
		if err == nil && !strings.Contains(out, marker) {
			err = fmt.Errorf("got %q", out)
		}
		return err
	}); err != nil {
		t.Errorf("Pod on %s → Pod on %s over TCP: %v", a.Name, b.Name, err)
	}

	// The emptyDir is a folder under node B's kubelet root, not node A's.
	rel := filepath.Join("pods", string(srv.UID), "volumes", "kubernetes.io~empty-dir", "data", "hello")
	var got []byte
	if err := cluster.Poll(ctx, func() error {
		got, err = os.ReadFile(filepath.Join(b.KubeletRootDir(), rel))
		return err
	}); err != nil {
		t.Fatalf("file written in the pod's emptyDir not under %s's kubelet root: %v", b.Name, err)
	}
	if strings.TrimSpace(string(got)) != marker {
		t.Errorf("%s = %q, want %q", rel, got, marker)
	}
	if _, err := os.Stat(filepath.Join(a.KubeletRootDir(), rel)); err == nil {
		t.Errorf("%s's Pod folder is under %s's kubelet root too", b.Name, a.Name)
	}
	if err := cluster.Poll(ctx, func() error {
		out, _, err := c.Kubectl("logs", "server")
		if err == nil && !strings.Contains(out, "wrote /data/hello") {
			err = fmt.Errorf("log %q", out)
		}
		return err
	}); err != nil {
		t.Errorf("kubectl logs: %v", err)
	}

	// Node B fails: its Pod's server dies with it; the node comes back and
	// its kubelet starts the Pod again.
	t0 = time.Now()
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := httpGetContains(ctx, url, marker); err == nil {
		t.Errorf("the Pod on %s still answers after the node stopped", b.Name)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s stopped and Ready again in %s", b.Name, time.Since(t0).Round(time.Millisecond))
	if err := cluster.Poll(ctx, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "server", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.PodIP == "" {
			return errors.New("no Pod IP yet")
		}
		return httpGetContains(ctx, "http://"+p.Status.PodIP+":8080/", marker)
	}); err != nil {
		t.Errorf("the Pod on %s after the node came back: %v", b.Name, err)
	}

	t0 = time.Now()
	if _, _, err := c.Kubectl("delete", "pod", "server", "client", "--wait=true", "--timeout=90s"); err != nil {
		t.Fatal(err)
	}
	t.Logf("pods deleted in %s", time.Since(t0).Round(time.Millisecond))
	podDir := filepath.Join(b.KubeletRootDir(), "pods", string(srv.UID))
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
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.Pid)); err == nil && !zombie(p.Pid) {
			t.Errorf("%s (pid %d) still exists after Stop", p.Name, p.Pid)
		}
	}
	if left := cluster.Leftovers(c.Dir, ""); len(left) > 0 {
		t.Errorf("left behind after Stop: %v", left)
	}
}

// busyboxPod is a Pod on node running script, with an emptyDir at /data.
func busyboxPod(name, node, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64(5)),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           cluster.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", script},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// httpGetContains GETs url (2 s timeout) and wants want in the body.
func httpGetContains(ctx context.Context, url, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s %q", url, resp.Status, body)
	}
	return nil
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
