//go:build cluster

package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/apiserver/apiservertest"
	"github.com/kemu-dev/kemu/test/cluster"
)

// TestAggregatedAPI runs kemu-api in process behind a real kube-apiserver's
// aggregation layer: discovery, the version endpoint, authorization of each
// subresource verb by kube-apiserver (a user without the verb gets 403),
// and what pause, migrate and start do to the objects. Needs make k8s.
func TestAggregatedAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.StartWithCRDs(ctx, t)
	in, err := apiservertest.Start(ctx, c, apiservertest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Stop(); err != nil {
			t.Error(err)
		}
	})
	admin := kubernetes.NewForConfigOrDie(c.RESTConfig())
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())

	t.Run("discovery", func(t *testing.T) {
		rl, err := admin.Discovery().ServerResourcesForGroupVersion(subresources.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range rl.APIResources {
			got[r.Name] = strings.Join(r.Verbs, ",")
		}
		for _, v := range subresources.Verbs {
			if got[v.Subresource()] != v.RBACVerb() {
				t.Errorf("discovery: %s has verbs %q, want %q (all: %v)", v.Subresource(), got[v.Subresource()], v.RBACVerb(), got)
			}
		}
	})

	t.Run("version", func(t *testing.T) {
		body, err := admin.Discovery().RESTClient().Get().AbsPath(subresources.VersionPath()).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var v subresources.ServerVersion
		if err := json.Unmarshal(body, &v); err != nil || v.GitVersion != "test" || v.GoVersion == "" {
			t.Fatalf("version: %s (%v)", body, err)
		}
	})

	const ns = "default"
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vmi1"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain:  v1.DomainSpec{Memory: &v1.Memory{Guest: ptr(resource.MustParse("128Mi"))}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}},
			Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/disk:1"}}},
		},
	}
	if vmi, err = kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// alice may only pause and migrate VMIs in ns.
	aliceCfg := c.RESTConfig()
	aliceCfg.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
	alice := restClient(t, aliceCfg)
	adminREST := restClient(t, c.RESTConfig())
	put := func(client rest.Interface, verb subresources.Verb, name, body string) ([]byte, error) {
		req := client.Put().AbsPath(verb.Path(ns, name))
		if body != "" {
			req = req.Body([]byte(body)).SetHeader("Content-Type", "application/json")
		}
		// Raw() returns the unstructured error; Error() decodes the Status.
		res := req.Do(ctx)
		raw, _ := res.Raw()
		return raw, res.Error()
	}
	if _, err := put(alice, subresources.Pause, vmi.Name, ""); !apierrors.IsForbidden(err) {
		t.Fatalf("pause by a user without RBAC: %v, want 403", err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pauser"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{subresources.Group}, Verbs: []string{"update"},
			Resources: []string{subresources.Pause.Subresource(), subresources.Migrate.Subresource()}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pauser"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pauser"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC takes effect when kube-apiserver's authorizer cache sees it.
	var perr error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, perr = put(alice, subresources.Pause, vmi.Name, "")
		return !apierrors.IsForbidden(perr), nil
	})
	if !apierrors.IsConflict(perr) || !strings.Contains(perr.Error(), "is not running") {
		t.Fatalf("pause of a VMI without a phase: %v, want 409 is not running", perr)
	}
	if _, err := put(alice, subresources.Unpause, vmi.Name, ""); !apierrors.IsForbidden(err) {
		t.Fatalf("unpause without its RBAC verb: %v, want 403", err)
	}
	if _, err := put(alice, subresources.Pause, "absent", ""); !apierrors.IsNotFound(err) {
		t.Fatalf("pause of an absent VMI: %v, want 404", err)
	}
	if _, err := put(alice, subresources.Pause, vmi.Name, `{"bogus":1}`); !apierrors.IsBadRequest(err) {
		t.Fatalf("pause with an unknown field: %v, want 400", err)
	}

	vmi.Status.Phase, vmi.Status.NodeName = v1.Running, "node-a"
	if vmi, err = kemu.KemuV1alpha1().VirtualMachineInstances(ns).UpdateStatus(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := put(alice, subresources.Pause, vmi.Name, `{"dryRun":["All"]}`); err != nil {
		t.Fatalf("dry-run pause: %v", err)
	}
	if got := annotation(ctx, t, kemu, ns, vmi.Name, v1.VMIPausedAnnotation); got != "" {
		t.Fatalf("dry-run pause wrote %s=%q", v1.VMIPausedAnnotation, got)
	}
	if _, err := put(alice, subresources.Pause, vmi.Name, ""); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if got := annotation(ctx, t, kemu, ns, vmi.Name, v1.VMIPausedAnnotation); got != "true" {
		t.Fatalf("after pause %s=%q, want true", v1.VMIPausedAnnotation, got)
	}

	body, err := put(alice, subresources.Migrate, vmi.Name, "")
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var vmim v1.VirtualMachineInstanceMigration
	if err := json.Unmarshal(body, &vmim); err != nil || vmim.Spec.VMIName != vmi.Name || vmim.Name == "" {
		t.Fatalf("migrate replied %s (%v)", body, err)
	}

	// Streams, guest reports and stats need the node agent; without one the
	// answer is 503, and a console request that is no WebSocket is 400.
	res := admin.Discovery().RESTClient().Get().AbsPath(subresources.GuestOSInfoVerb.Path(ns, vmi.Name)).Do(ctx)
	if err := res.Error(); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("guestosinfo without node agents: %v, want 503", err)
	}
	// Authorized as get virtualmachineinstances/stats: alice's Role has
	// no such rule.
	if err := alice.Get().AbsPath(subresources.StatsVerb.Path(ns, vmi.Name)).Do(ctx).Error(); !apierrors.IsForbidden(err) {
		t.Fatalf("stats by a user without RBAC for it: %v, want 403", err)
	}
	res = admin.Discovery().RESTClient().Get().AbsPath(subresources.StatsVerb.Path(ns, vmi.Name)).Do(ctx)
	if err := res.Error(); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("stats without node agents: %v, want 503", err)
	}
	var code int
	res = admin.Discovery().RESTClient().Get().AbsPath(subresources.Console.Path(ns, vmi.Name)).Do(ctx).StatusCode(&code)
	if code != http.StatusBadRequest {
		t.Fatalf("console without WebSocket: HTTP %d (%v), want 400", code, res.Error())
	}

	// VM start on a Halted VM sets runStrategy Always.
	halted := v1.RunStrategyHalted
	vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1"}, Spec: v1.VirtualMachineSpec{
		RunStrategy: &halted, Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: vmi.Spec}}}
	if _, err := kemu.KemuV1alpha1().VirtualMachines(ns).Create(ctx, vm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := put(adminREST, subresources.Start, vm.Name, ""); err != nil {
		t.Fatalf("start: %v", err)
	}
	got, err := kemu.KemuV1alpha1().VirtualMachines(ns).Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil || got.Spec.RunStrategy == nil || *got.Spec.RunStrategy != v1.RunStrategyAlways {
		t.Fatalf("after start: %+v (%v), want runStrategy Always", got.Spec.RunStrategy, err)
	}
	if _, err := put(adminREST, subresources.Start, vm.Name, `{"paused":true}`); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("start paused: %v, want 400 naming paused", err)
	}
}

func annotation(ctx context.Context, t *testing.T, kemu versioned.Interface, ns, name, key string) string {
	t.Helper()
	vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return vmi.Annotations[key]
}

func ptr[T any](v T) *T { return &v }

func restClient(t *testing.T, cfg *rest.Config) rest.Interface {
	t.Helper()
	cfg.GroupVersion = &schema.GroupVersion{Group: subresources.Group, Version: subresources.Version}
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}
