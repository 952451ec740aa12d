package admission

import (
	"encoding/json"
	"fmt"
	"slices"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// mutateVMI stores a new VMI's defaults: a JSON patch of spec from what the
// user wrote to what v1alpha1.SetVirtualMachineInstanceDefaults makes of it,
// and adds v1.VMIFinalizer (which the controller would otherwise add with a
// write of its own before it creates the launcher Pod). Only CREATE: a
// VMI's spec is immutable afterwards. An object that does not decode is let
// through unchanged, for the CRD schema to refuse it with its own message
// (schema validation runs after mutating admission).
func mutateVMI(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if err := checkKind(req, vmiKind); err != nil {
		return deny(err)
	}
	if req.Operation != admissionv1.Create {
		return allow()
	}
	var vmi v1.VirtualMachineInstance
	if err := decode(req.Object, "object", &vmi); err != nil {
		return allow()
	}
	var raw struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(req.Object.Raw, &raw); err != nil {
		return allow()
	}
	var written map[string]any
	if err := json.Unmarshal(req.Object.Raw, &written); err != nil {
		return allow()
	}
	defaultVMI(req, &vmi)
	// Refused here, where what the user wrote is known, errors name the
	// fields as written (validation.AsWritten); the validating webhook sees
	// the defaults stored and judges the same VMI.
	if errs := validation.ValidateVirtualMachineInstance(&vmi); len(errs) > 0 {
		return invalid(vmiKind, vmi.Name, validation.AsWritten(errs, &vmi, written))
	}
	ops, err := specPatch(raw.Spec, &vmi.Spec)
	if err != nil {
		return deny(fmt.Errorf("defaulting: %w", err))
	}
	switch {
	case vmi.DeletionTimestamp != nil || slices.Contains(vmi.Finalizers, v1.VMIFinalizer):
	case len(vmi.Finalizers) == 0:
		ops = append(ops, jsonpatch.NewOperation("add", "/metadata/finalizers", []string{v1.VMIFinalizer}))
	default:
		ops = append(ops, jsonpatch.NewOperation("add", "/metadata/finalizers/-", v1.VMIFinalizer))
	}
	if len(ops) == 0 {
		return allow()
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return deny(fmt.Errorf("defaulting: %w", err))
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}

// specPatch is the JSON patch (RFC 6902) turning the object's spec, as sent
// (orig; empty if it had none), into spec; nil when they are equal. Its
// operations touch only /spec, so metadata is never rewritten.
func specPatch(orig json.RawMessage, spec any) ([]jsonpatch.Operation, error) {
	want, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var ops []jsonpatch.Operation
	if len(orig) == 0 || string(orig) == "null" {
		var v any
		if err := json.Unmarshal(want, &v); err != nil {
			return nil, err
		}
		ops = []jsonpatch.Operation{jsonpatch.NewOperation("add", "/spec", v)}
	} else {
		if ops, err = jsonpatch.CreatePatch(orig, want); err != nil {
			return nil, err
		}
		for i := range ops {
			ops[i].Path = "/spec" + ops[i].Path
		}
	}
	return ops, nil
}
