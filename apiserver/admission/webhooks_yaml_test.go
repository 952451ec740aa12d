package admission

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// deploy/base/webhooks.yaml names exactly the paths Handlers serves, on the
// resources and operations each webhook judges, never a subresource.
func TestWebhooksYAML(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "base", "webhooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(b, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("%d documents, want 2", len(docs))
	}
	var mut admissionregv1.MutatingWebhookConfiguration
	var val admissionregv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(docs[0], &mut); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(docs[1], &val); err != nil {
		t.Fatal(err)
	}
	if mut.Kind != "MutatingWebhookConfiguration" || mut.Name != "kemu-api" || val.Kind != "ValidatingWebhookConfiguration" || val.Name != "kemu-api" {
		t.Fatalf("kinds/names: %s %s, %s %s", mut.Kind, mut.Name, val.Kind, val.Name)
	}
	type hook struct {
		path, resource string
		ops            []admissionregv1.OperationType
		cc             admissionregv1.WebhookClientConfig
		common         []any
	}
	var got []hook
	for _, w := range mut.Webhooks {
		got = append(got, hook{path: *w.ClientConfig.Service.Path, resource: w.Rules[0].Resources[0], ops: w.Rules[0].Operations, cc: w.ClientConfig,
			common: []any{*w.FailurePolicy, *w.MatchPolicy, *w.SideEffects, *w.TimeoutSeconds, w.AdmissionReviewVersions, len(w.Rules), w.Rules[0].APIGroups, w.Rules[0].APIVersions, len(w.Rules[0].Resources)}})
	}
	for _, w := range val.Webhooks {
		got = append(got, hook{path: *w.ClientConfig.Service.Path, resource: w.Rules[0].Resources[0], ops: w.Rules[0].Operations, cc: w.ClientConfig,
			common: []any{*w.FailurePolicy, *w.MatchPolicy, *w.SideEffects, *w.TimeoutSeconds, w.AdmissionReviewVersions, len(w.Rules), w.Rules[0].APIGroups, w.Rules[0].APIVersions, len(w.Rules[0].Resources)}})
	}
	create := []admissionregv1.OperationType{admissionregv1.Create}
	createUpdate := []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update}
	want := map[string]struct {
		resource string
		ops      []admissionregv1.OperationType
	}{
		PathMutateVMI:    {"virtualmachineinstances", create},
		PathValidateVMI:  {"virtualmachineinstances", createUpdate},
		PathValidateVM:   {"virtualmachines", createUpdate},
		PathValidateVMIM: {"virtualmachineinstancemigrations", createUpdate},
	}
	if len(got) != len(Paths) || len(want) != len(Paths) {
		t.Fatalf("%d webhooks, %d paths", len(got), len(Paths))
	}
	common := []any{admissionregv1.Fail, admissionregv1.Equivalent, admissionregv1.SideEffectClassNone, int32(10), []string{"v1"}, 1, []string{"kemu.dev"}, []string{"v1alpha1"}, 1}
	for _, h := range got {
		w, ok := want[h.path]
		if !ok || !slices.Contains(Paths, h.path) {
			t.Errorf("path %s is not served", h.path)
			continue
		}
		if h.resource != w.resource || !slices.Equal(h.ops, w.ops) {
			t.Errorf("%s: %s %v, want %s %v", h.path, h.resource, h.ops, w.resource, w.ops)
		}
		s := h.cc.Service
		if s.Namespace != DefaultNamespace || s.Name != "kemu-api" || *s.Port != 443 || h.cc.URL != nil || len(h.cc.CABundle) != 0 {
			t.Errorf("%s: clientConfig %+v", h.path, h.cc)
		}
		for i := range common {
			if !equalAny(h.common[i], common[i]) {
				t.Errorf("%s: setting %d is %v, want %v", h.path, i, h.common[i], common[i])
			}
		}
		delete(want, h.path)
	}
	if len(want) != 0 {
		t.Errorf("paths without a webhook: %v", want)
	}
}

func equalAny(a, b any) bool {
	as, aok := a.([]string)
	bs, bok := b.([]string)
	if aok && bok {
		return slices.Equal(as, bs)
	}
	return a == b
}
