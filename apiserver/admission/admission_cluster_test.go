//go:build cluster

package admission_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/manifest"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/apiserver/admission"
	"github.com/kemu-dev/kemu/apiserver/admission/admissiontest"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/test/cluster"
)

const ns = "tenant"

func vmiManifest(name, spec string) string {
	return "apiVersion: kemu.dev/v1alpha1\nkind: VirtualMachineInstance\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\nspec:" + spec + "\n"
}

const goodSpec = `
  domain:
    memory: {guest: 128Mi}
    devices:
      disks: [{name: root}]
  volumes: [{name: root, containerDisk: {image: example/os:1}}]`

// webhookConfigs reads deploy/base/webhooks.yaml and points it at url with caPEM.
func webhookConfigs(t *testing.T, url string, caPEM []byte) (*admissionregv1.MutatingWebhookConfiguration, *admissionregv1.ValidatingWebhookConfiguration) {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "base", "webhooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(b, []byte("\n---\n"))
	var mut admissionregv1.MutatingWebhookConfiguration
	var val admissionregv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(docs[0], &mut); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(docs[1], &val); err != nil {
		t.Fatal(err)
	}
	point := func(cc *admissionregv1.WebhookClientConfig) {
		u := url + *cc.Service.Path
		cc.Service, cc.URL, cc.CABundle = nil, &u, caPEM
	}
	for i := range mut.Webhooks {
		point(&mut.Webhooks[i].ClientConfig)
	}
	for i := range val.Webhooks {
		point(&val.Webhooks[i].ClientConfig)
	}
	return &mut, &val
}

func TestAdmissionOnKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	c, err := cluster.Start(ctx, cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if err := c.InstallCRDs(); err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(c.RESTConfig())
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	// CDI's installation is asked on every VM (TTL 0): the DataVolume case
	// installs the DataVolume CRD in the middle.
	cdiProbe := &cdi.Probe{Discovery: kc.Discovery()}
	for path, h := range admission.Handlers(admission.Config{CDIInstalled: cdiProbe.Installed}) {
		mux.Handle(path, h)
	}
	srv := httptest.NewTLSServer(mux) // 127.0.0.1, a certificate for it
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	mut, val := webhookConfigs(t, srv.URL, caPEM)
	regs := kc.AdmissionregistrationV1()
	if _, err := regs.MutatingWebhookConfigurations().Create(ctx, mut, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := regs.ValidatingWebhookConfigurations().Create(ctx, val, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Webhook configurations take effect asynchronously: wait until a VMI
	// only the webhook refuses (an unknown CPU model) is refused by it.
	probe := vmiManifest("probe", strings.Replace(goodSpec, "memory: {guest: 128Mi}", "memory: {guest: 128Mi}\n    cpu: {model: help}", 1))
	poll(t, 60*time.Second, func() (bool, string) {
		_, stderr, err := c.KubectlInput(probe, "apply", "--dry-run=server", "-f", "-")
		return err != nil && strings.Contains(stderr, "spec.domain.cpu.model"), stderr
	})

	t.Run("bad manifests are refused naming every field path", func(t *testing.T) {
		for _, tt := range admissiontest.BadVMIs {
			doc := vmiManifest("bad", tt.Spec)
			docs, err := manifest.Read(strings.NewReader(doc))
			if err != nil || len(docs) != 1 || len(docs[0].Errors) == 0 {
				t.Fatalf("%s: kemu's validation does not refuse it: %v %+v", tt.Name, err, docs)
			}
			for _, dry := range [][]string{nil, {"--dry-run=server"}} {
				_, stderr, err := c.KubectlInput(doc, append([]string{"apply", "-f", "-"}, dry...)...)
				if err == nil {
					t.Errorf("%s %v: accepted", tt.Name, dry)
					continue
				}
				for _, p := range tt.Paths {
					if !strings.Contains(stderr, p) {
						t.Errorf("%s %v: %s not named in\n%s", tt.Name, dry, p, stderr)
					}
				}
			}
		}
	})

	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	t.Run("a good VMI is stored with its defaults", func(t *testing.T) {
		if _, stderr, err := c.KubectlInput(vmiManifest("good", goodSpec), "apply", "-f", "-"); err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		got, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, "good", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := got.DeepCopy()
		v1.SetVirtualMachineInstanceDefaults(want)
		d := got.Spec.Domain
		if d.Machine == nil || d.Machine.Type != v1.DefaultMachineType || d.Firmware == nil ||
			d.Firmware.UUID != v1.DeriveFirmwareUUID(ns, "good") || len(got.Spec.Networks) != 1 ||
			d.Devices.Disks[0].Disk == nil || d.Devices.Disks[0].Disk.Bus != v1.DiskBusVirtio {
			t.Errorf("defaults not stored: %+v", got.Spec)
		}
		if out, _, _ := c.Kubectl("get", "vmi", "-n", ns, "good", "-o", "yaml"); !strings.Contains(out, "machine:\n        type: q35") && !strings.Contains(out, "machine:\n      type: q35") || !strings.Contains(out, "uuid: "+string(v1.DeriveFirmwareUUID(ns, "good"))) {
			t.Errorf("kubectl get -o yaml does not show the defaults:\n%s", out)
		}
		if !equalJSON(t, got.Spec, want.Spec) {
			t.Errorf("stored spec is not the defaulted spec")
		}
	})

	t.Run("spec and request annotations are kemu's", func(t *testing.T) {
		user := c.RESTConfig()
		user.Impersonate.UserName = "alice"
		sa := c.RESTConfig()
		sa.Impersonate.UserName = "system:serviceaccount:kemu-system:kemu-api"
		// alice may do anything RBAC-wise; only admission stands in her way.
		if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, clusterAdmin("alice"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, clusterAdminSA("kemu-system", "kemu-api"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		asUser := versioned.NewForConfigOrDie(user).KemuV1alpha1().VirtualMachineInstances(ns)
		asSA := versioned.NewForConfigOrDie(sa).KemuV1alpha1().VirtualMachineInstances(ns)
		specPatch := []byte(`{"spec":{"domain":{"memory":{"guest":"256Mi"}}}}`)
		pausePatch := []byte(`{"metadata":{"annotations":{"kemu.dev/paused":"true"}}}`)
		labelPatch := []byte(`{"metadata":{"labels":{"team":"a"}}}`)
		for _, tt := range []struct {
			who    string
			client interface {
				Patch(context.Context, string, typesPatch, []byte, metav1.PatchOptions, ...string) (*v1.VirtualMachineInstance, error)
			}
			patch []byte
			want  string // "" allowed, else in the error
		}{
			{"alice", asUser, specPatch, "spec: Forbidden"},
			{"kemu-api", asSA, specPatch, "spec: Forbidden"},
			{"alice", asUser, pausePatch, "metadata.annotations[kemu.dev/paused]: Forbidden"},
			{"alice", asUser, labelPatch, ""},
			{"kemu-api", asSA, pausePatch, ""},
		} {
			for _, dry := range [][]string{{metav1.DryRunAll}, nil} {
				_, err := tt.client.Patch(ctx, "good", mergePatch, tt.patch, metav1.PatchOptions{DryRun: dry})
				switch {
				case tt.want == "" && err != nil:
					t.Errorf("%s %s %v: %v", tt.who, tt.patch, dry, err)
				case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
					t.Errorf("%s %s %v: %v, want %q", tt.who, tt.patch, dry, err, tt.want)
				}
			}
		}
	})

	t.Run("a VM with dataVolumeTemplates needs CDI's API", func(t *testing.T) {
		// CDI's real CRD is not available offline: a minimal stand-in
		// (test/cluster.InstallDataVolumeCRD) makes discovery serve
		// DataVolumes.
		const vm = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachine
metadata: {name: dv, namespace: ` + ns + `}
spec:
  runStrategy: Always
  dataVolumeTemplates:
  - metadata: {name: dv-root}
    spec: {source: {blank: {}}, storage: {resources: {requests: {storage: 1Gi}}}}
  template:
    spec:
      domain:
        memory: {guest: 128Mi}
        devices: {disks: [{name: root}]}
      volumes: [{name: root, dataVolume: {name: dv-root}}]
`
		_, stderr, err := c.KubectlInput(vm, "apply", "--dry-run=server", "-f", "-")
		if err == nil || !strings.Contains(stderr, "spec.dataVolumeTemplates: Forbidden") ||
			!strings.Contains(stderr, "cdi.kubevirt.io/v1beta1 datavolumes") {
			t.Errorf("without CDI: err %v: %s", err, stderr)
		}
		if err := c.InstallDataVolumeCRD(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := c.RemoveDataVolumeCRD(); err != nil {
				t.Error(err)
			}
		}()
		// Discovery serves the new group once the CRD is Established.
		poll(t, 30*time.Second, func() (bool, string) {
			_, stderr, err := c.KubectlInput(vm, "apply", "--dry-run=server", "-f", "-")
			return err == nil, stderr
		})
	})

	t.Run("examples: cluster ones accepted, standalone ones refused naming the local image", func(t *testing.T) {
		root, err := cluster.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		good, _ := filepath.Glob(filepath.Join(root, "examples", "cluster", "*.yaml"))
		bad, _ := filepath.Glob(filepath.Join(root, "examples", "standalone", "*.yaml"))
		if len(good) == 0 || len(bad) == 0 {
			t.Fatalf("examples: %d cluster, %d standalone", len(good), len(bad))
		}
		for _, f := range good {
			if _, stderr, err := c.Kubectl("apply", "--dry-run=server", "-n", ns, "-f", f); err != nil {
				t.Errorf("%s: %v\n%s", filepath.Base(f), err, stderr)
			}
		}
		for _, f := range bad {
			_, stderr, err := c.Kubectl("apply", "--dry-run=server", "-n", ns, "-f", f)
			if err == nil || !strings.Contains(stderr, ".image: Forbidden") ||
				!strings.Contains(stderr, "oci: references are for kemuctl run only; a cluster pulls images from a registry") {
				t.Errorf("%s: err %v\n%s", filepath.Base(f), err, stderr)
			}
		}
	})

	t.Run("webhooks unreachable: creates are refused", func(t *testing.T) {
		srv.Close()
		_, stderr, err := c.KubectlInput(vmiManifest("down", goodSpec), "apply", "-f", "-")
		if err == nil || !strings.Contains(stderr, "failed calling webhook") || !strings.Contains(stderr, "virtualmachineinstances.mutate.kemu.dev") {
			t.Errorf("err %v: %s", err, stderr)
		}
	})

	t.Run("without the webhooks, the CRD's rules still refuse", func(t *testing.T) {
		if err := regs.MutatingWebhookConfigurations().Delete(ctx, mut.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := regs.ValidatingWebhookConfigurations().Delete(ctx, val.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, 60*time.Second, func() (bool, string) {
			_, stderr, err := c.KubectlInput(vmiManifest("nowebhook", goodSpec), "apply", "--dry-run=server", "-f", "-")
			return err == nil, stderr
		})
		for _, tt := range admissiontest.BadVMIs[:2] {
			_, stderr, err := c.KubectlInput(vmiManifest("bad", tt.Spec), "apply", "-f", "-")
			if err == nil {
				t.Errorf("%s: accepted", tt.Name)
				continue
			}
			for _, p := range tt.Paths {
				if !strings.Contains(stderr, p) {
					t.Errorf("%s: %s not named in\n%s", tt.Name, p, stderr)
				}
			}
		}
		_, stderr, err := c.KubectlInput(vmiManifest("bad", admissiontest.BadVMIs[0].Spec), "apply", "-f", "-")
		if err == nil || !strings.Contains(stderr, "every disk attaches a volume of its name") {
			t.Errorf("err %v: %s", err, stderr)
		}
	})
}
