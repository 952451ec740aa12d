package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/cli/clitest"
)

// run executes kemuctl validate, convert or explain with args and stdin, returning
// stdout, stderr and the exit status main would use.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return clitest.Run(t, cli.Root(cli.Name, cli.NewCluster(), NewValidateCommand(), NewConvertCommand(), NewExplainCommand()), stdin, args...)
}

func TestValidateExamplesAndTestdata(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*/*.yaml")
	kv, _ := filepath.Glob("../../api/manifest/testdata/kubevirt/*")
	files = append(files, kv...)
	if len(files) < 3 {
		t.Fatalf("only %d manifests found", len(files))
	}
	stdout, stderr, code := run(t, "", append([]string{"validate"}, files...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	if n := strings.Count(stdout, ": valid\n"); n < len(files) {
		t.Errorf("%d valid lines for %d files:\n%s", n, len(files), stdout)
	}
}

// Every example lives under the directory of where it runs: standalone/
// (kemuctl run), cluster/ (kubectl apply), kubevirt/ (KubeVirt's, for
// kemuctl convert). --for cluster passes the cluster and KubeVirt ones and
// refuses every standalone one, naming its local image's field.
func TestValidateForCluster(t *testing.T) {
	all, _ := filepath.Glob("../../examples/*")
	for _, f := range all {
		if b := filepath.Base(f); b != "standalone" && b != "cluster" && b != "kubevirt" && b != "README.md" {
			t.Errorf("%s: an example belongs in examples/standalone, examples/cluster or examples/kubevirt", f)
		}
	}
	clusterReady, _ := filepath.Glob("../../examples/cluster/*.yaml")
	kv, _ := filepath.Glob("../../examples/kubevirt/*.yaml")
	clusterReady = append(clusterReady, kv...)
	standalone, _ := filepath.Glob("../../examples/standalone/*.yaml")
	if len(clusterReady) < 6 || len(standalone) < 2 {
		t.Fatalf("only %d cluster and %d standalone examples", len(clusterReady), len(standalone))
	}
	tests := []struct {
		name  string
		args  []string
		code  int
		wants []string
	}{
		{"cluster examples for a cluster", append([]string{"validate", "--for", "cluster"}, clusterReady...), 0, nil},
		{"cluster examples for run", append([]string{"validate", "--for=run"}, clusterReady...), 0, nil},
		{"standalone examples for run (the default)", append([]string{"validate"}, standalone...), 0, nil},
		{"testguest for a cluster", []string{"validate", "--for", "cluster", "../../examples/standalone/vmi-testguest.yaml"}, 1, []string{
			`VirtualMachineInstance/testguest: spec.volumes[0].containerDisk.image: Forbidden: "oci:_out/testguest/oci/containerdisk": oci: references are for kemuctl run only; a cluster pulls images from a registry`}},
		{"kernelboot for a cluster", []string{"validate", "--for", "cluster", "../../examples/standalone/vmi-kernelboot.yaml"}, 1, []string{
			"spec.domain.firmware.kernelBoot.container.image: Forbidden"}},
		{"a VM's template from stdin", []string{"validate", "--for", "cluster", "-"}, 1, []string{
			`spec.template.spec.volumes[0].containerDisk.image: Forbidden: "docker-archive:os.tar": docker-archive: references`}},
		{"unknown --for", []string{"validate", "--for", "moon", "-"}, 2, nil},
	}
	vm := `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: vm}
spec:
  runStrategy: Always
  template:
    spec:
      domain: {memory: {guest: 128Mi}, devices: {}}
      volumes: [{name: root, containerDisk: {image: "docker-archive:os.tar"}}]
`
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := run(t, vm, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.wants {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
}

func TestValidateReportsPaths(t *testing.T) {
	stdout, _, code := run(t, "", "validate", "../../api/manifest/testdata/bad/unsupported.yaml")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"spec.domain.devices.gpus: Forbidden: kemu does not support this KubeVirt field",
		"spec.volumes[0].dataVolume.hotpluggable: Forbidden",
		"spec.domain.devices.interfaces[1].sriov: Forbidden",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestValidateStdinJSONAndMissingFile(t *testing.T) {
	json := `{"apiVersion":"kemu.dev/v1alpha1","kind":"VirtualMachineInstanceMigration","metadata":{"name":"m"},"spec":{"vmiName":"vm"}}`
	if out, errOut, code := run(t, json, "validate", "-"); code != 0 {
		t.Errorf("stdin JSON: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code := run(t, "", "validate", filepath.Join(t.TempDir(), "nope.yaml"))
	if code != 1 || !strings.Contains(errOut, "nope.yaml") {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
	if _, _, code := run(t, "", "validate"); code != 2 {
		t.Errorf("no arguments: exit %d, want 2", code)
	}
}

func TestConvert(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "vmi.yaml")
	if err := os.WriteFile(src, []byte(`apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: vmi
  resourceVersion: "12"
  uid: 0b8c4e32-2bd4-4d8b-9f0b-3b5ea1f1f0d5
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      autoattachVSOCK: true
      disks: [{name: root, disk: {bus: sata}}]
  volumes:
  - name: root
    containerDisk: {image: "example/os:1"}
status:
  phase: Running
`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(t, "", "convert", src)
	if code != 1 {
		t.Errorf("exit %d, want 1 (autoattachVSOCK cannot be carried over)", code)
	}
	if !strings.Contains(stderr, "spec.domain.devices.autoattachVSOCK: not carried over") {
		t.Errorf("stderr does not report autoattachVSOCK:\n%s", stderr)
	}
	for _, gone := range []string{"autoattachVSOCK", "kubevirt.io", "resourceVersion", "uid:", "status"} {
		if strings.Contains(stdout, gone) {
			t.Errorf("converted manifest still has %q:\n%s", gone, stdout)
		}
	}
	conv := filepath.Join(dir, "kemu.yaml")
	if err := os.WriteFile(conv, []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run(t, "", "validate", conv); code != 0 {
		t.Errorf("converted manifest does not validate: %s%s", out, errOut)
	}
	if out, _, code := run(t, "", "convert", "-o", "json", "../../api/manifest/testdata/kubevirt/vm-disks.json"); code != 0 || !strings.Contains(out, `"apiVersion": "kemu.dev/v1alpha1"`) {
		t.Errorf("json output: exit %d\n%s", code, out)
	}
}

// A document after YAML's document end marker ("...") is validated too: its
// error fails the run.
func TestValidateAfterDocumentEnd(t *testing.T) {
	src := filepath.Join(t.TempDir(), "two.yaml")
	if err := os.WriteFile(src, []byte(`apiVersion: kubevirt.io/v1
kind: VirtualMachineInstanceMigration
metadata: {name: first}
spec: {vmiName: vm}
...
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstanceMigration
metadata: {name: second}
spec: {}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(t, "", "validate", src)
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"#0 VirtualMachineInstanceMigration/first: valid", "#1 VirtualMachineInstanceMigration/second: spec.vmiName: Required value"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

// Only the versions KubeVirt serves with v1's schema are read.
func TestValidateAPIVersion(t *testing.T) {
	in := "apiVersion: kubevirt.io/v1alpha3\nkind: VirtualMachineInstanceMigration\nmetadata: {name: m}\nspec: {vmiName: vm}\n" +
		"---\napiVersion: kubevirt.io/v2\nkind: VirtualMachineInstanceMigration\nmetadata: {name: n}\nspec: {vmiName: vm}\n"
	stdout, _, code := run(t, in, "validate", "-")
	if code != 1 || !strings.Contains(stdout, "-#0 VirtualMachineInstanceMigration/m: valid") ||
		!strings.Contains(stdout, `apiVersion: Unsupported value: "kubevirt.io/v2": supported values: "kemu.dev/v1alpha1", "kubevirt.io/v1", "kubevirt.io/v1alpha3"`) {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
}

func TestExplainCommand(t *testing.T) {
	stdout, stderr, code := run(t, "", "explain", "vmi.spec.volumes")
	if code != 0 || !strings.Contains(stdout, "spec.volumes[].configMap <object>") || !strings.Contains(stdout, "not supported") ||
		!strings.Contains(stderr, "KubeVirt v") {
		t.Errorf("exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := run(t, "", "explain", "vmi.spec.nosuch"); code == 0 || !strings.Contains(stderr, `no field "nosuch"`) {
		t.Errorf("unknown field: exit %d: %s", code, stderr)
	}
}

// The KubeVirt examples: each is read as kemu reads it and uses only
// supported fields (vm-cirros's clock among them).
func TestKubeVirtExamples(t *testing.T) {
	files, _ := filepath.Glob("../../examples/kubevirt/*.yaml")
	if len(files) < 4 {
		t.Fatalf("only %d KubeVirt examples", len(files))
	}
	for _, f := range files {
		stdout, stderr, code := run(t, "", "validate", f)
		want := 0
		if code != want {
			t.Errorf("%s: exit %d, want %d\n%s%s", f, code, want, stdout, stderr)
		}
	}
}
