package certs

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// APIServices is the resource of kube-aggregator's APIService.
// APIServices (kube-aggregator's) and the webhook configurations.
var (
	APIServices                     = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	MutatingWebhookConfigurations   = admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations")
	ValidatingWebhookConfigurations = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations")
)

// Injector writes a CA bundle into the named APIService and webhook
// configurations, changing only what differs. An object that does not
// exist is an error (deploy/ creates them; kemu-api only fills them in).
type Injector struct {
	Dynamic dynamic.Interface
	// APIService, MutatingWebhooks, ValidatingWebhooks name the objects.
	APIService         string
	MutatingWebhooks   string
	ValidatingWebhooks string
}

// Inject writes bundle everywhere; it returns every failure.
func (in Injector) Inject(ctx context.Context, bundle []byte) error {
	return errors.Join(in.apiService(ctx, bundle),
		in.webhooks(ctx, MutatingWebhookConfigurations, in.MutatingWebhooks, bundle),
		in.webhooks(ctx, ValidatingWebhookConfigurations, in.ValidatingWebhooks, bundle))
}

func (in Injector) apiService(ctx context.Context, bundle []byte) error {
	if in.APIService == "" {
		return nil
	}
	c := in.Dynamic.Resource(APIServices)
	obj, err := c.Get(ctx, in.APIService, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("APIService %s: %w", in.APIService, err)
	}
	// caBundle is base64 in JSON, as []byte marshals.
	want := base64.StdEncoding.EncodeToString(bundle)
	if got, _, _ := unstructured.NestedString(obj.Object, "spec", "caBundle"); got == want {
		return nil
	}
	patch := []byte(`{"spec":{"caBundle":"` + want + `"}}`)
	if _, err := c.Patch(ctx, in.APIService, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("APIService %s: writing caBundle: %w", in.APIService, err)
	}
	return nil
}

// webhooks writes bundle into every webhook's clientConfig.caBundle of
// the webhook configuration gvr/name.
func (in Injector) webhooks(ctx context.Context, gvr schema.GroupVersionResource, name string, bundle []byte) error {
	if name == "" {
		return nil
	}
	c := in.Dynamic.Resource(gvr)
	obj, err := c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%s %s: %w", gvr.Resource, name, err)
	}
	want := base64.StdEncoding.EncodeToString(bundle)
	hooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
	changed := false
	for _, h := range hooks {
		hook, ok := h.(map[string]any)
		if !ok {
			continue
		}
		if got, _, _ := unstructured.NestedString(hook, "clientConfig", "caBundle"); got != want {
			if err := unstructured.SetNestedField(hook, want, "clientConfig", "caBundle"); err != nil {
				return fmt.Errorf("%s %s: %w", gvr.Resource, name, err)
			}
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := unstructured.SetNestedSlice(obj.Object, hooks, "webhooks"); err != nil {
		return fmt.Errorf("%s %s: %w", gvr.Resource, name, err)
	}
	// A conflict means someone wrote it meanwhile: the next round retries.
	if _, err := c.Update(ctx, obj, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("%s %s: writing caBundle: %w", gvr.Resource, name, err)
	}
	return nil
}
