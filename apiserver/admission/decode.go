package admission

import (
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Kinds the webhooks admit.
var (
	vmiKind  = metav1.GroupVersionKind{Group: v1.GroupName, Version: v1.SchemeGroupVersion.Version, Kind: "VirtualMachineInstance"}
	vmKind   = metav1.GroupVersionKind{Group: v1.GroupName, Version: v1.SchemeGroupVersion.Version, Kind: "VirtualMachine"}
	vmimKind = metav1.GroupVersionKind{Group: v1.GroupName, Version: v1.SchemeGroupVersion.Version, Kind: "VirtualMachineInstanceMigration"}
)

// checkKind refuses a request for another kind than the webhook's (a
// misconfigured webhook rule).
func checkKind(req *admissionv1.AdmissionRequest, want metav1.GroupVersionKind) error {
	if req.Kind != want {
		return fmt.Errorf("this webhook admits %s, not %s", kindString(want), kindString(req.Kind))
	}
	return nil
}

func kindString(k metav1.GroupVersionKind) string {
	return k.Kind + "." + k.Version + "." + k.Group
}

// decode reads an object of the request (Object or OldObject).
func decode(raw runtime.RawExtension, what string, into any) error {
	if len(raw.Raw) == 0 {
		return fmt.Errorf("the request has no %s", what)
	}
	if err := json.Unmarshal(raw.Raw, into); err != nil {
		return fmt.Errorf("decoding the request's %s: %w", what, err)
	}
	return nil
}
