package v1alpha1

import (
	"bytes"
	"errors"
)

// The Unsupported* types hold KubeVirt fields that kemu does not implement.
// Each keeps whatever value was sent, so the field is never pruned silently:
// defaulting leaves it alone, api/validation reports it with its path, and
// the CRD schema keeps it (typed, so CEL can see it) and rejects it with a
// rule that always fails. There is one type per JSON shape because a CEL
// rule needs a typed schema.

// UnsupportedField is implemented by every Unsupported* type.
//
// +kubebuilder:object:generate=false
type UnsupportedField interface {
	// IsSet says whether the field was given.
	IsSet() bool
}

// RawJSON keeps a JSON value as it was received.
type RawJSON struct {
	// Raw is the value's JSON text.
	Raw []byte `json:"-"`
}

// UnmarshalJSON keeps the raw value.
func (r *RawJSON) UnmarshalJSON(data []byte) error {
	if r == nil {
		return errors.New("v1alpha1.RawJSON: UnmarshalJSON on nil pointer")
	}
	r.Raw = append(r.Raw[:0], data...)
	return nil
}

// MarshalJSON writes the raw value back.
func (r RawJSON) MarshalJSON() ([]byte, error) {
	if len(bytes.TrimSpace(r.Raw)) == 0 {
		return []byte("null"), nil
	}
	return r.Raw, nil
}

// Unsupported is a KubeVirt object field that kemu does not implement; setting it is an error.
//
// +kubebuilder:validation:Type=object
// +kubebuilder:pruning:PreserveUnknownFields
// +kubebuilder:validation:XValidation:rule="false",message="is not supported by kemu"
type Unsupported struct {
	RawJSON `json:",inline"`
}

// IsSet implements UnsupportedField.
func (u *Unsupported) IsSet() bool { return u != nil }

// UnsupportedScalar is a KubeVirt string or number field that kemu does not implement; setting it is an error.
//
// +kubebuilder:validation:XIntOrString
// +kubebuilder:validation:XValidation:rule="false",message="is not supported by kemu"
type UnsupportedScalar struct {
	RawJSON `json:",inline"`
}

// IsSet implements UnsupportedField.
func (u *UnsupportedScalar) IsSet() bool { return u != nil }

// UnsupportedBool is a KubeVirt boolean field that kemu does not implement; setting it is an error.
//
// +kubebuilder:validation:Type=boolean
// +kubebuilder:validation:XValidation:rule="false",message="is not supported by kemu"
type UnsupportedBool struct {
	RawJSON `json:",inline"`
}

// IsSet implements UnsupportedField.
func (u *UnsupportedBool) IsSet() bool { return u != nil }

// UnsupportedList is a KubeVirt list field that kemu does not implement; setting it is an error.
//
// +kubebuilder:validation:XValidation:rule="false",message="is not supported by kemu"
type UnsupportedList []UnsupportedItem

// IsSet implements UnsupportedField.
func (u UnsupportedList) IsSet() bool { return u != nil }

// UnsupportedItem is one item of an UnsupportedList.
//
// +kubebuilder:validation:Type=object
// +kubebuilder:pruning:PreserveUnknownFields
type UnsupportedItem struct {
	RawJSON `json:",inline"`
}
