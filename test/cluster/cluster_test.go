//go:build cluster

package cluster_test

import (
	"context"
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

// shared is the cluster every test of this package uses (see TestMain).
var shared *cluster.Cluster

func TestMain(m *testing.M) {
	t0 := time.Now()
	c, err := cluster.Start(context.Background(), cluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = c
	fmt.Fprintf(os.Stderr, "cluster: %s ready in %s\n", c.Host, time.Since(t0).Round(time.Millisecond))
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster stop:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func TestNamespaceConfigMapKubectl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(shared.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "kemu-smoke"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().ConfigMaps(ns.Name).Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("get configmap: %v %v", got, err)
	}

	out, _, err := shared.Kubectl("get", "ns")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NAME", "default", "kube-system", "kemu-smoke"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get ns: missing %q in:\n%s", want, out)
		}
	}
	out, _, err = shared.Kubectl("-n", ns.Name, "get", "configmap", "hello", "-o", "jsonpath={.data.k}")
	if err != nil || out != "v" {
		t.Errorf("kubectl get configmap: %q %v", out, err)
	}
	if out, _, err := shared.Kubectl("auth", "can-i", "*", "*"); err != nil || strings.TrimSpace(out) != "yes" {
		t.Errorf("admin is not cluster-admin: %q %v", out, err)
	}
	t.Logf("startup %s, RSS %v", shared.StartupDuration.Round(time.Millisecond), mib(shared.RSS()))
}

// TestStartStopNoLeftovers starts a second cluster next to the shared one,
// stops it and checks that no process of it remains and its folder is gone.
func TestStartStopNoLeftovers(t *testing.T) {
	c, err := cluster.Start(context.Background(), cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	procs := c.Processes()
	if len(procs) != 2 {
		t.Fatalf("processes: %+v", procs)
	}
	if out, _, err := c.Kubectl("get", "--raw", "/readyz"); err != nil || out != "ok" {
		t.Fatalf("readyz via kubectl: %q %v", out, err)
	}
	rss := c.RSS()
	t.Logf("startup %s, RSS %v", c.StartupDuration.Round(time.Millisecond), mib(rss))
	t0 := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop took %s", time.Since(t0).Round(time.Millisecond))
	if err := c.Stop(); err != nil { // idempotent
		t.Fatal(err)
	}
	for _, p := range procs {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.Pid)); err == nil {
			t.Errorf("%s (pid %d) still exists after Stop", p.Name, p.Pid)
		}
	}
	if left := processesMentioning(c.Dir); len(left) > 0 {
		t.Errorf("processes still running with %s in their command line: %v", c.Dir, left)
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s not removed: %v", c.Dir, err)
	}
	// The shared cluster is unaffected.
	if _, _, err := shared.Kubectl("get", "ns", "default"); err != nil {
		t.Errorf("shared cluster broken after stopping another: %v", err)
	}
}

func TestMissingBinaries(t *testing.T) {
	_, err := cluster.Start(context.Background(), cluster.Options{BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "hack/k8s/build.sh") {
		t.Fatalf("want an error pointing at hack/k8s/build.sh, got %v", err)
	}
}

// processesMentioning lists pids whose command line contains s.
func processesMentioning(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(b), s) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

func mib(m map[string]int64) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprintf("%d MiB", v>>20)
	}
	return out
}

// TestControllerManager runs a cluster with kube-controller-manager and the
// ServiceAccount admission plugin: Pods are admitted (the "default"
// ServiceAccount exists) and owner references are garbage-collected.
func TestControllerManager(t *testing.T) {
	bin := shared.BinDir + "/kube-controller-manager"
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing (make k8s builds it): %v", bin, err)
	}
	c, err := cluster.Start(context.Background(), cluster.Options{
		ControllerManager:       true,
		ServiceAccountAdmission: true,
		Logf:                    t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	t.Logf("startup with controller-manager %s, RSS %v", c.StartupDuration.Round(time.Millisecond), mib(c.RSS()))

	pod := `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: example.invalid/none}]
`
	if _, _, err := c.KubectlInput(pod, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := c.Kubectl("get", "pod", "p", "-o", "jsonpath={.spec.serviceAccountName}"); err != nil || out != "default" {
		t.Errorf("pod service account: %q %v", out, err)
	}

	// Garbage collection: deleting the owner removes the dependent.
	if _, _, err := c.Kubectl("create", "configmap", "owner"); err != nil {
		t.Fatal(err)
	}
	uid, _, err := c.Kubectl("get", "configmap", "owner", "-o", "jsonpath={.metadata.uid}")
	if err != nil {
		t.Fatal(err)
	}
	dep := fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: %s}]
`, uid)
	if _, _, err := c.KubectlInput(dep, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Kubectl("delete", "configmap", "owner"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, _, err := c.Kubectl("wait", "--for=delete", "configmap/dependent", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}
	t.Logf("dependent garbage-collected in %s", time.Since(t0).Round(time.Millisecond))
}
