//go:build cluster

package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kemu-dev/kemu/test/cluster"
)

// crdNamespace holds the objects of the CRD acceptance test.
const crdNamespace = "kemu-crd"

var vmiGVR = schema.GroupVersionResource{Group: "kemu.dev", Version: "v1alpha1", Resource: "virtualmachineinstances"}

// minimalVMI is the smallest VMI a user would write: a containerDisk volume
// with its disk and a guest memory size.
const minimalVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata:
  name: NAME
spec:
  domain:
    memory:
      guest: 128Mi
    devices:
      disks:
      - name: root
        disk:
          bus: virtio
  volumes:
  - name: root
    containerDisk:
      image: quay.io/containerdisks/cirros:latest
`

func vmiYAML(name string) string { return strings.Replace(minimalVMI, "NAME", name, 1) }

// installCRDs applies deploy/base/crd/ as a user would and waits until the CRDs
// are Established.
func installCRDs(t *testing.T) {
	t.Helper()
	dir := os.Getenv("KEMU_CRD_DIR") // to try CRDs generated elsewhere
	if dir == "" {
		root, err := cluster.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "deploy", "base", "crd")
	}
	files := []string{
		"kemu.dev_virtualmachineinstances.yaml",
		"kemu.dev_virtualmachines.yaml",
		"kemu.dev_virtualmachineinstancemigrations.yaml",
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("CRD manifest missing (generate it with controller-gen): %v", err)
		}
	}
	if _, _, err := shared.Kubectl("apply", "-f", dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := shared.Kubectl("wait", "--for=condition=Established", "--timeout=60s",
		"crd/virtualmachineinstances.kemu.dev",
		"crd/virtualmachines.kemu.dev",
		"crd/virtualmachineinstancemigrations.kemu.dev"); err != nil {
		t.Fatal(err)
	}
	// Also the discovery view a user's kubectl gets.
	out, _, err := shared.Kubectl("api-resources", "--api-group=kemu.dev", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl api-resources --api-group=kemu.dev -o wide:\n%s", out)
	if _, _, err := shared.Kubectl("get", "ns", crdNamespace); err != nil {
		if _, _, err := shared.Kubectl("create", "ns", crdNamespace); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCRDs(t *testing.T) {
	installCRDs(t)
	k := func(args ...string) (string, string, error) {
		return shared.Kubectl(append([]string{"-n", crdNamespace}, args...)...)
	}

	t.Run("minimal VMI is accepted", func(t *testing.T) {
		if _, _, err := shared.KubectlInput(vmiYAML("minimal"), "-n", crdNamespace, "create", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		out, _, err := k("get", "vmi", "minimal", "-o", "jsonpath={.spec.domain.memory.guest} {.spec.volumes[0].containerDisk.image}")
		if err != nil {
			t.Fatal(err)
		}
		if out != "128Mi quay.io/containerdisks/cirros:latest" {
			t.Errorf("stored VMI: %q", out)
		}
	})

	wantCols := []string{"NAME", "PHASE", "NODE", "IP", "READY", "AGE"}
	t.Run("kubectl get vmi shows the printer columns", func(t *testing.T) {
		out, _, err := k("get", "vmi")
		if err != nil {
			t.Fatal(err)
		}
		checkTable(t, "kubectl get vmi", out, wantCols, "minimal")
	})

	t.Run("kubectl get kemu lists VMIs by category", func(t *testing.T) {
		out, _, err := k("get", "kemu")
		if err != nil {
			t.Fatal(err)
		}
		checkTable(t, "kubectl get kemu", out, wantCols, "virtualmachineinstance.kemu.dev/minimal")
	})

	t.Run("short names vm and vmim", func(t *testing.T) {
		for _, r := range []string{"vm", "vmim", "vmi"} {
			if _, stderr, err := k("get", r); err != nil {
				t.Errorf("kubectl get %s: %v", r, err)
			} else if r != "vmi" && !strings.Contains(stderr, "No resources found") {
				t.Errorf("kubectl get %s: stderr %q", r, stderr)
			}
		}
	})

	// Unsupported KubeVirt fields must be rejected by the API server, not
	// pruned. --validate=false makes kubectl send fieldValidation=Ignore, so
	// the rejection has to come from the CRD schema itself (as it does for
	// client-go callers), not from strict unknown-field checking.
	rejects := []struct {
		name, want, from, to string
	}{
		{"gpus", "gpus",
			"    devices:\n",
			"    devices:\n      gpus:\n      - name: g\n        deviceName: x\n"},
		{"vmipv6networkcidr", "vmIPv6NetworkCIDR",
			"  volumes:\n",
			"  networks:\n  - name: net1\n    pod:\n      vmIPv6NetworkCIDR: fd10:0:2::/120\n  volumes:\n"},
		{"datavolume-hotpluggable", "hotpluggable",
			"  volumes:\n",
			"  volumes:\n  - name: dv\n    dataVolume:\n      name: my-dv\n      hotpluggable: true\n"},
		{"video", "video",
			"    devices:\n",
			"    devices:\n      video:\n        type: virtio\n"},
		{"rebootpolicy", "rebootPolicy",
			"    devices:\n",
			"    rebootPolicy: Terminate\n    devices:\n"},
	}
	for _, r := range rejects {
		t.Run("unsupported "+r.want+" is rejected", func(t *testing.T) {
			name := "bad-" + r.name
			manifest := strings.Replace(vmiYAML(name), r.from, r.to, 1)
			if manifest == vmiYAML(name) {
				t.Fatal("test manifest not modified")
			}
			for _, validate := range []string{"--validate=false", "--validate=strict"} {
				_, stderr, err := shared.KubectlInput(manifest, "-n", crdNamespace, "create", validate, "-f", "-")
				if err == nil {
					k("delete", "vmi", name, "--wait=false")
					t.Fatalf("%s: VMI with %s was accepted:\n%s", validate, r.want, manifest)
				}
				if !strings.Contains(stderr, r.want) {
					t.Errorf("%s: error does not name %q: %s", validate, r.want, stderr)
				}
				if strings.Contains(stderr, "unknown field") {
					t.Errorf("%s: rejected as an unknown field (schema prunes it) rather than by the CRD: %s", validate, stderr)
				}
				t.Logf("%s: %s", validate, strings.TrimSpace(stderr))
			}
			if _, _, err := k("get", "vmi", name); err == nil {
				t.Errorf("VMI %s exists after a rejected create", name)
			}
		})
	}

	t.Run("volume with two sources is rejected by CEL", func(t *testing.T) {
		manifest := strings.Replace(vmiYAML("two-sources"),
			"    containerDisk:\n", "    emptyDisk:\n      capacity: 1Gi\n    containerDisk:\n", 1)
		_, stderr, err := shared.KubectlInput(manifest, "-n", crdNamespace, "create", "--validate=false", "-f", "-")
		if err == nil {
			k("delete", "vmi", "two-sources", "--wait=false")
			t.Fatalf("VMI with two volume sources was accepted:\n%s", manifest)
		}
		// A failing CEL rule on the volume object reads
		// `spec.volumes[0]: Invalid value: <message>`; a schema error would
		// name a field below it ("must be of type", "Required value").
		if !strings.Contains(stderr, "spec.volumes[0]: Invalid value") {
			t.Errorf("not a CEL rejection of spec.volumes[0]: %s", stderr)
		}
		if _, _, err := k("get", "vmi", "two-sources"); err == nil {
			t.Errorf("VMI two-sources exists after a rejected create")
		}
		t.Log(strings.TrimSpace(stderr))
	})

	t.Run("status subresource", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dc, err := dynamic.NewForConfig(shared.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		vmis := dc.Resource(vmiGVR).Namespace(crdNamespace)
		obj, err := vmis.Get(ctx, "minimal", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		// PUT /status with a changed status and a changed spec: only the
		// status may change.
		obj.Object["status"] = map[string]any{
			"phase":      "Running",
			"nodeName":   "node-a",
			"interfaces": []any{map[string]any{"name": "default", "ipAddress": "10.1.2.3"}},
			"conditions": []any{map[string]any{"type": "Ready", "status": "True"}},
		}
		must(t, unstructured.SetNestedField(obj.Object, "256Mi", "spec", "domain", "memory", "guest"))
		got, err := vmis.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "Running" {
			t.Errorf("status.phase after PUT /status = %q, want Running", phase)
		}
		if mem, _, _ := unstructured.NestedString(got.Object, "spec", "domain", "memory", "guest"); mem != "128Mi" {
			t.Errorf("PUT /status changed spec.domain.memory.guest to %q", mem)
		}

		// PUT to the main resource ignores status.
		must(t, unstructured.SetNestedField(got.Object, "Failed", "status", "phase"))
		got2, err := vmis.Update(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if phase, _, _ := unstructured.NestedString(got2.Object, "status", "phase"); phase != "Running" {
			t.Errorf("PUT to the main resource changed status.phase to %q", phase)
		}

		// The printer columns show the status.
		out, _, err := k("get", "vmi", "minimal")
		if err != nil {
			t.Fatal(err)
		}
		checkTable(t, "kubectl get vmi minimal", out, wantCols, "minimal")
		row := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])
		if len(row) < 5 || !slices.Equal(row[:5], []string{"minimal", "Running", "node-a", "10.1.2.3", "True"}) {
			t.Errorf("row = %v, want minimal Running node-a 10.1.2.3 True <age>", row)
		}
	})

	// -o wide adds KubeVirt's priority-1 columns (Live-Migratable, Paused)
	// and kemu's (Agent-Connected, Guest-OS, Reason); a VM shows the
	// conditions it mirrors from its VMI.
	conds := []any{map[string]any{"type": "Ready", "status": "False"}, map[string]any{"type": "LiveMigratable", "status": "True"},
		map[string]any{"type": "Paused", "status": "True"}, map[string]any{"type": "AgentConnected", "status": "True"}}
	t.Run("kubectl get vmi -o wide", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dc, err := dynamic.NewForConfig(shared.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := shared.KubectlInput(vmiYAML("wide"), "-n", crdNamespace, "create", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		vmis := dc.Resource(vmiGVR).Namespace(crdNamespace)
		obj, err := vmis.Get(ctx, "wide", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj.Object["status"] = map[string]any{"phase": "Failed", "reason": "InvalidImageName", "nodeName": "node-a",
			"interfaces": []any{map[string]any{"name": "default", "ipAddress": "10.1.2.4"}}, "conditions": conds, "guestOSInfo": map[string]any{"prettyName": "Debian"}}
		if _, err := vmis.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		out, _, err := k("get", "vmi", "wide", "-o", "wide")
		if err != nil {
			t.Fatal(err)
		}
		checkTable(t, "kubectl get vmi -o wide", out, append(slices.Clone(wantCols),
			"LIVE-MIGRATABLE", "PAUSED", "AGENT-CONNECTED", "GUEST-OS", "REASON"), "wide")
		row := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])
		want := []string{"wide", "Failed", "node-a", "10.1.2.4", "False", "", "True", "True", "True", "Debian", "InvalidImageName"}
		if len(row) != len(want) || !slices.Equal(row[:5], want[:5]) || !slices.Equal(row[6:], want[6:]) {
			t.Errorf("row = %v, want %v (age at 5)", row, want)
		}
	})
	t.Run("kubectl get vm -o wide", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dc, err := dynamic.NewForConfig(shared.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		vm := "apiVersion: kemu.dev/v1alpha1\nkind: VirtualMachine\nmetadata:\n  name: wide\nspec:\n  runStrategy: Halted\n  template:\n" +
			indent(strings.SplitN(vmiYAML("wide"), "\nspec:\n", 2)[1], "    ", "    spec:\n")
		if _, stderr, err := shared.KubectlInput(vm, "-n", crdNamespace, "create", "-f", "-"); err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		vms := dc.Resource(vmiGVR.GroupVersion().WithResource("virtualmachines")).Namespace(crdNamespace)
		obj, err := vms.Get(ctx, "wide", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj.Object["status"] = map[string]any{"printableStatus": "Paused", "ready": true, "conditions": conds}
		if _, err := vms.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		out, _, err := k("get", "vm", "wide", "-o", "wide")
		if err != nil {
			t.Fatal(err)
		}
		checkTable(t, "kubectl get vm -o wide", out, []string{"NAME", "STATUS", "READY", "AGE", "LIVE-MIGRATABLE", "PAUSED", "AGENT-CONNECTED"}, "wide")
		row := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])
		if len(row) != 7 || !slices.Equal(row[4:], []string{"True", "True", "True"}) {
			t.Errorf("row = %v, want wide Paused true <age> True True True", row)
		}
	})
}

// indent prefixes each line of s with prefix, after head.
func indent(s, prefix, head string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return head + strings.Join(lines, "\n") + "\n"
}

// checkTable asserts that out is a kubectl table whose header is exactly
// cols and which has a row starting with name.
func checkTable(t *testing.T, what, out string, cols []string, name string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("%s: want a header and rows, got:\n%s", what, out)
	}
	if h := strings.Fields(lines[0]); !slices.Equal(h, cols) {
		t.Errorf("%s: header %v, want %v", what, h, cols)
	}
	found := false
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			found = true
		}
	}
	if !found {
		t.Errorf("%s: no row %q in:\n%s", what, name, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
