//go:build cluster

package verbs

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
)

// TestCompletion completes VMI names for the VMI verbs, VM names for the VM
// verbs and namespaces for -n, listing on a real kube-apiserver through
// cobra's __complete, with the connection flags and the kubeconfig
// context's namespace honoured. Needs make k8s.
func TestCompletion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startCRDCluster(ctx, t, cluster.Options{})
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	for _, ns := range []string{"ns1", "ns2"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createVMI(ctx, t, kemu, "ns1", "a1", v1.VirtualMachineInstanceStatus{Phase: v1.Running})
	createVMI(ctx, t, kemu, "ns1", "a2", v1.VirtualMachineInstanceStatus{Phase: v1.Running})
	createVMI(ctx, t, kemu, "ns2", "b1", v1.VirtualMachineInstanceStatus{Phase: v1.Running})
	halted := v1.RunStrategyHalted
	mem := resource.MustParse("128Mi")
	if _, err := kemu.KemuV1alpha1().VirtualMachines("ns1").Create(ctx, &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns1"},
		Spec: v1.VirtualMachineSpec{RunStrategy: &halted, Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
			Domain:  v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}},
			Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/cirros:6.2"}}},
		}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A kubeconfig whose current context's namespace is ns2, with a
	// second context "other" in ns1.
	raw, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := raw.Contexts[raw.CurrentContext]
	other := *cur
	other.Namespace = "ns1"
	cur.Namespace = "ns2"
	raw.Contexts["other"] = &other
	nsConfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*raw, nsConfig); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")

	const noFiles = ":4\n" // cobra.ShellCompDirectiveNoFileComp
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"VMIs of -n", []string{"pause", "-n", "ns1", "--kubeconfig", c.Kubeconfig, ""}, "a1\na2\n"},
		{"VMIs by prefix", []string{"console", "--namespace=ns1", "--kubeconfig", c.Kubeconfig, "a2"}, "a2\n"},
		{"VMIs of default", []string{"migrate", "--kubeconfig", c.Kubeconfig, ""}, ""},
		{"VMIs of the context's namespace", []string{"unpause", "--kubeconfig", nsConfig, ""}, "b1\n"},
		{"VMIs of --context", []string{"soft-reboot", "--kubeconfig", nsConfig, "--context", "other", ""}, "a1\na2\n"},
		{"-n beats the context", []string{"migrate-cancel", "--kubeconfig", nsConfig, "-n", "ns1", ""}, "a1\na2\n"},
		{"VMs, not VMIs", []string{"start", "-n", "ns1", "--kubeconfig", c.Kubeconfig, ""}, "vm1\n"},
		{"VMs of the context's namespace", []string{"stop", "--kubeconfig", nsConfig, ""}, ""},
		{"shell VMI", []string{"shell", "-n", "ns1", "--kubeconfig", c.Kubeconfig, ""}, "a1\na2\n"},
		{"shell --socket takes no VMI", []string{"shell", "--socket", "/s", "-n", "ns1", "--kubeconfig", c.Kubeconfig, ""}, ""},
		{"one argument only", []string{"pause", "-n", "ns1", "--kubeconfig", c.Kubeconfig, "a1", ""}, ""},
		{"namespaces", []string{"pause", "--kubeconfig", c.Kubeconfig, "-n", "ns"}, "ns1\nns2\n"},
		{"namespaces, long flag", []string{"restart", "x", "--kubeconfig", c.Kubeconfig, "--namespace", "kube-"},
			"kube-node-lease\nkube-public\nkube-system\n"},
		{"contexts", []string{"pause", "--kubeconfig", nsConfig, "--context", "o"}, "other\n"},
		{"no cluster", []string{"pause", "-n", "ns1", "--kubeconfig", missing, ""}, ""},
	} {
		stdout, stderr, code := run(t, "", append([]string{"__complete"}, tc.args...)...)
		if code != 0 || stdout != tc.want+noFiles {
			t.Errorf("%s: kemuctl __complete %q: exit %d, stdout %q (want %q), stderr %q",
				tc.name, tc.args, code, stdout, tc.want+noFiles, stderr)
		}
	}
}
