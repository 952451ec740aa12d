package admission

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// A serviceAccount volume is admitted only for users who could run a Pod as
// that ServiceAccount or request its tokens; kemu's own accounts are not
// asked; a VM's template is checked when it changes.
func TestServiceAccountVolumeAccess(t *testing.T) {
	withSA := strings.Replace(goodVMI, "    containerDisk:\n      image: example/os:1\n",
		"    serviceAccount: {serviceAccountName: builder}\n", 1)
	vm := "apiVersion: kemu.dev/v1alpha1\nkind: VirtualMachine\nmetadata: {name: vm, namespace: ns}\nspec:\n  runStrategy: Halted\n  template:\n" +
		indentYAML(strings.SplitN(withSA, "spec:\n", 2)[1], "    ")
	vm = strings.Replace(vm, "  template:\n", "  template:\n    spec:\n", 1)
	grants := func(allowed ...string) (Authorizer, *[]string) {
		var asked []string
		return func(_ context.Context, s authorizationv1.SubjectAccessReviewSpec) (bool, string, error) {
			a := s.ResourceAttributes
			key := s.User + " " + a.Verb + " " + a.Resource
			if a.Subresource != "" {
				key += "/" + a.Subresource + " " + a.Name
			}
			asked = append(asked, key)
			if s.User == "broken" {
				return false, "", errors.New("connection refused")
			}
			return slices.Contains(allowed, key), "RBAC: no", nil
		}, &asked
	}
	for _, tc := range []struct {
		name, user, path, obj string
		allowed               []string
		want                  []string // causes
	}{
		{"pod creator", "alice", PathValidateVMI, withSA, []string{"alice create pods"}, nil},
		{"token requester", "bob", PathValidateVMI, withSA, []string{"bob create serviceaccounts/token builder"}, nil},
		{"neither", "mallory", PathValidateVMI, withSA, nil, []string{"spec.volumes[0].serviceAccount.serviceAccountName: FieldValueForbidden"}},
		{"authorizer down", "broken", PathValidateVMI, withSA, nil, []string{"spec.volumes[0].serviceAccount.serviceAccountName: InternalError"}},
		{"kemu's controller", "system:serviceaccount:kemu-system:kemu-controller", PathValidateVMI, withSA, nil, nil},
		{"no such volume", "mallory", PathValidateVMI, goodVMI, nil, nil},
		{"VM template", "mallory", PathValidateVM, vm, nil, []string{"spec.template.spec.volumes[0].serviceAccount.serviceAccountName: FieldValueForbidden"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			authz, asked := grants(tc.allowed...)
			kind := vmiKind
			if tc.path == PathValidateVM {
				kind = vmKind
			}
			resp := Handlers(Config{Authorize: authz})[tc.path].(*webhook).admit(request(t, kind, admissionv1.Create, tc.user, tc.obj, ""))
			if got := causes(resp); resp.Allowed != (len(tc.want) == 0) || !slices.Equal(got, tc.want) {
				t.Errorf("allowed %v causes %v (%+v), want %v; asked %v", resp.Allowed, got, resp.Result, tc.want, *asked)
			}
		})
	}
}

func indentYAML(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}
