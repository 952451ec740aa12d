//go:build cluster

package cluster_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/manifest"
	"github.com/kemu-dev/kemu/test/cluster"
)

// manifestsOf reads every document of the repository files matching glob.
func manifestsOf(t *testing.T, glob string) map[string][]*manifest.Document {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, glob))
	if len(files) == 0 {
		t.Fatalf("nothing matches %s", glob)
	}
	out := map[string][]*manifest.Document{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := manifest.Read(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = docs
	}
	return out
}

// The API server accepts what kemu's own validation accepts: the examples
// and the converted KubeVirt manifests are created, with the client's
// schema check off so the CRD schema alone judges, and read back unchanged
// in what matters (a VM template's metadata is not pruned).
func TestServerAcceptsValidManifests(t *testing.T) {
	installCRDs(t)
	sets := []map[string][]*manifest.Document{
		manifestsOf(t, "examples/standalone/*.yaml"),
		manifestsOf(t, "examples/cluster/*.yaml"),
		manifestsOf(t, "api/manifest/testdata/kubevirt/*"),
	}
	n := 0
	for _, set := range sets {
		for file, docs := range set {
			for _, d := range docs {
				n++
				ns := fmt.Sprintf("accept-%d", n)
				t.Run(file+"/"+d.Describe(), func(t *testing.T) {
					if len(d.Errors) > 0 {
						t.Fatalf("kemu rejects it: %v", d.Errors)
					}
					c, err := manifest.Convert(d)
					if err != nil {
						t.Fatal(err)
					}
					if md, ok := c.Object["metadata"].(map[string]any); ok {
						delete(md, "namespace")
					}
					body, err := json.Marshal(c.Object)
					if err != nil {
						t.Fatal(err)
					}
					if _, _, err := shared.Kubectl("create", "namespace", ns); err != nil {
						t.Fatal(err)
					}
					if _, _, err := shared.KubectlInput(string(body), "-n", ns, "create", "--validate=false", "-f", "-"); err != nil {
						t.Fatalf("the API server refuses a manifest kemu accepts: %v\n%s", err, body)
					}
					group, _, _ := strings.Cut(fmt.Sprint(c.Object["apiVersion"]), "/") // kemu.dev or instancetype.kemu.dev
					out, _, err := shared.Kubectl("-n", ns, "get", strings.ToLower(d.Kind)+"."+group, d.Name, "-o", "yaml")
					if err != nil {
						t.Fatal(err)
					}
					var stored map[string]any
					if err := yaml.Unmarshal([]byte(out), &stored); err != nil {
						t.Fatal(err)
					}
					spec, _ := json.Marshal(stored["spec"])
					want, _ := json.Marshal(c.Object["spec"])
					if string(spec) != string(want) {
						t.Errorf("stored spec differs (pruned?):\n got  %s\n want %s", spec, want)
					}
				})
			}
		}
	}
}

// What kemu reports as unsupported, the API server refuses, naming the same
// paths — whatever the JSON shape of the field (object, list, string, bool).
func TestServerRejectsWhatKemuRejects(t *testing.T) {
	installCRDs(t)
	extra := `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata:
  name: shapes
spec:
  hostname: guest
  domain:
    memory: {guest: 128Mi, maxGuest: 1Gi}
    cpu: {maxSockets: 4, dedicatedCpuPlacement: true}
    ioThreads: {supplementalPoolThreadCount: 2}
    devices:
      autoattachVSOCK: true
      hostDevices: [{name: h, deviceName: d}]
      disks: [{name: root, disk: {bus: virtio}, tag: boot}]
  volumes:
  - name: root
    containerDisk: {image: "example/os:1"}
`
	docs, err := manifest.Read(strings.NewReader(extra))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]*manifest.Document{"shapes": docs[0]}
	for file, ds := range manifestsOf(t, "api/manifest/testdata/bad/*") {
		for _, d := range ds {
			cases[file] = d
		}
	}
	if _, _, err := shared.Kubectl("create", "namespace", "reject"); err != nil {
		t.Fatal(err)
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			var paths []string
			for _, e := range d.Errors {
				if e.Detail == "kemu does not support this KubeVirt field" {
					paths = append(paths, e.Field)
				}
			}
			if len(paths) == 0 {
				t.Fatalf("kemu reports nothing unsupported: %v", d.Errors)
			}
			// The manifest as written, only moved to kemu's apiVersion.
			body, err := yaml.Marshal(d.Object)
			if err != nil {
				t.Fatal(err)
			}
			_, stderr, err := shared.KubectlInput(string(body), "-n", "reject", "create", "--validate=false", "-f", "-")
			if err == nil {
				t.Fatalf("the API server accepted it:\n%s", body)
			}
			for _, p := range paths {
				if !strings.Contains(stderr, p+": Invalid value") || !strings.Contains(stderr, "is not supported by kemu") {
					t.Errorf("server error does not name %s as unsupported:\n%s", p, stderr)
				}
			}
		})
	}
}
