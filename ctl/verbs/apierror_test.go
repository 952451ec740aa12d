package verbs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/kemu-dev/kemu/api/subresources"
)

// kemu-api's answers as kemuctl prints them.
func TestRequestError(t *testing.T) {
	vms := schema.GroupResource{Group: "kemu.dev", Resource: "virtualmachines"}
	vmis := schema.GroupResource{Group: "kemu.dev", Resource: "virtualmachineinstances"}
	for _, tc := range []struct {
		name     string
		kind     string
		resource string
		err      error
		want     string
	}{
		{"not found", "VM", subresources.VMs, apierrors.NewNotFound(vms, "a"), "VM ns/a not found"},
		{"another object not found", "VMI", subresources.VMIs, apierrors.NewNotFound(vmis, "b"),
			`VMI ns/a: virtualmachineinstances.kemu.dev "b" not found (is kemu-api, the APIService v1alpha1.subresources.kemu.dev, available?)`},
		{"kemu-api's refusal", "VMI", subresources.VMIs, apierrors.NewConflict(vmis, "a", errors.New("VMI ns/a is already paused")),
			"VMI ns/a is already paused"},
		{"a lost race", "VM", subresources.VMs, apierrors.NewConflict(vms, "a", errors.New(registry.OptimisticLockErrorMsg)),
			"VM ns/a changed meanwhile, try again"},
		{"forbidden", "VM", subresources.VMs, apierrors.NewForbidden(schema.GroupResource{Group: subresources.Group, Resource: "virtualmachines/start"}, "a", errors.New("RBAC: no")),
			`VM ns/a: virtualmachines/start.subresources.kemu.dev "a" is forbidden: RBAC: no`},
		{"a failed upgrade", "VMI", subresources.VMIs, fmt.Errorf("opening: %w", &httpstream.UpgradeFailureError{
			Cause: apierrors.NewConflict(vmis, "a", errors.New("VMI ns/a is not running (phase Succeeded)"))}),
			"VMI ns/a is not running (phase Succeeded)"},
		{"no API status", "VMI", subresources.VMIs, errors.New("dial tcp: refused"), "VMI ns/a: dial tcp: refused"},
	} {
		if got := requestError(tc.kind, tc.resource, "ns", "a", tc.err).Error(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if !strings.HasPrefix(registry.OptimisticLockErrorMsg, optimisticLockMsg) {
		t.Errorf("optimisticLockMsg %q does not start k8s.io/apiserver's %q", optimisticLockMsg, registry.OptimisticLockErrorMsg)
	}
}

// A VM verb is sent again after a lost race, not after a refusal.
func TestVMVerbRetries(t *testing.T) {
	vms := schema.GroupResource{Group: "kemu.dev", Resource: "virtualmachines"}
	start := vmVerb{verb: subresources.Start, use: "start"}
	api := &fakeAPI{err: apierrors.NewConflict(vms, "a", errors.New(registry.OptimisticLockErrorMsg))}
	if _, err := start.run(context.Background(), api, "ns", "a"); err == nil || len(api.puts) != 1+vmConflictRetries {
		t.Errorf("lost races: %v after %d PUTs", err, len(api.puts))
	}
	api = &fakeAPI{err: apierrors.NewConflict(vms, "a", errors.New("VM ns/a is already running (VMI phase Running)"))}
	if _, err := start.run(context.Background(), api, "ns", "a"); err == nil || len(api.puts) != 1 ||
		err.Error() != "VM ns/a is already running (VMI phase Running)" {
		t.Errorf("refusal: %v after %d PUTs", err, len(api.puts))
	}
	if msg, err := start.run(context.Background(), &fakeAPI{}, "ns", "a"); err != nil || msg != "VM ns/a was scheduled to start" {
		t.Errorf("start: %q %v", msg, err)
	}
}
