//go:build cluster

package cluster_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/test/cluster"
)

// hack/cluster.sh up --nodes 2 starts a cluster of two nodes with kemu's
// CRDs in the background and prints its kubeconfig, kubectl and the nodes'
// containerd sockets; down stops exactly what
// up started (by pid) and checks that nothing is left.
func TestClusterScript(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	script := filepath.Join(root, "hack", "cluster.sh")
	// The script keeps its state in <repo>/_out/cluster; a copy of the
	// script in a scratch tree would need the whole module, so run it in
	// place and make sure nobody else's cluster is running there.
	if out, err := exec.Command("bash", script, "status").CombinedOutput(); err == nil {
		t.Fatalf("a hack/cluster.sh cluster is already running: %s", out)
	}
	out, err := exec.Command("bash", script, "up", "--nodes", "2").Output()
	if err != nil {
		t.Fatalf("cluster.sh up: %v\n%s", err, out)
	}
	pidText, err := os.ReadFile(filepath.Join(root, "_out", "cluster", "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidText)))
	// What up prints: the KUBECONFIG to export, the cluster's kubectl,
	// each node's containerd socket (present) and how to import into it.
	var kubeconfig string
	sockets := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, ok := strings.CutPrefix(l, "export KUBECONFIG="); ok {
			kubeconfig = k
		}
		if f := strings.Fields(l); len(f) == 4 && f[0] == "node" && f[2] == "containerd" {
			sockets[strings.TrimSuffix(f[1], ":")] = f[3]
		}
	}
	kubectl := filepath.Join(root, "_out", "k8s", "bin", "kubectl")
	if kubeconfig == "" || !strings.Contains(string(out), "kubectl: "+filepath.Dir(kubectl)+"/kubectl") ||
		!strings.Contains(string(out), "images import") {
		t.Errorf("cluster.sh up printed no KUBECONFIG, kubectl or import command:\n%s", out)
	}
	for _, n := range []string{"kemu-node-1", "kemu-node-2"} {
		if st, err := os.Stat(sockets[n]); err != nil || st.Mode()&os.ModeSocket == 0 {
			t.Errorf("node %s's containerd socket %q: %v\n%s", n, sockets[n], err, out)
		}
	}
	got, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "--cache-dir", state, "get", "crd", "-o", "name").CombinedOutput()
	if err != nil || !strings.Contains(string(got), "virtualmachineinstances.kemu.dev") {
		t.Errorf("kubectl get crd: %v\n%s", err, got)
	}
	got, err = exec.Command(kubectl, "--kubeconfig", kubeconfig, "--cache-dir", state, "get", "nodes", "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`).CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "kemu-node-1=True kemu-node-2=True" {
		t.Errorf("kubectl get nodes: %v %q, want two Ready nodes", err, got)
	}
	log, _ := os.ReadFile(filepath.Join(root, "_out", "cluster", "log"))
	var dir string
	for _, l := range strings.Split(string(log), "\n") {
		if d, ok := strings.CutPrefix(l, "DIR="); ok {
			dir = d
		}
	}
	if dir == "" {
		t.Fatalf("no DIR= line in the cluster's log:\n%s", log)
	}
	children := descendants(pid)
	if len(children) < 3 {
		t.Errorf("cluster pid %d has %d descendants, want etcd, kube-apiserver, kube-controller-manager", pid, len(children))
	}
	if out, err := exec.Command("bash", script, "down").CombinedOutput(); err != nil {
		t.Fatalf("cluster.sh down: %v\n%s", err, out)
	}
	if left := cluster.Leftovers(dir, ""); len(left) > 0 {
		t.Errorf("left behind after down: %v", left)
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the kubeconfig %s of the stopped cluster is still there (%v)", kubeconfig, err)
	}
	for _, p := range append(children, pid) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(p)); err == nil && !zombie(p) {
			t.Errorf("process %d still running after down", p)
		}
	}
}

// descendants lists the processes below pid (from /proc/*/stat).
func descendants(pid int) []int {
	parent := map[int]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		p, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
		pp, _ := strconv.Atoi(f[1])
		parent[p] = pp
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}
