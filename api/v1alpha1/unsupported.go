package v1alpha1

import (
	"bytes"
	"errors"
)

// An Unsupported field keeps whatever was sent (object, list, scalar) so it is
// never pruned silently: defaulting leaves it alone, validation and the CRD
// schema reject it with an error naming its path.

// Unsupported is a KubeVirt field that kemu does not implement; setting it is an error.
//
// +kubebuilder:validation:Type=""
// +kubebuilder:pruning:PreserveUnknownFields
// +kubebuilder:validation:XValidation:rule="false",message="is not supported by kemu"
type Unsupported struct {
	// Raw is the field's JSON value as received.
	Raw []byte `json:"-"`
}

// UnmarshalJSON keeps the raw value.
func (u *Unsupported) UnmarshalJSON(data []byte) error {
	if u == nil {
		return errors.New("v1alpha1.Unsupported: UnmarshalJSON on nil pointer")
	}
	u.Raw = append(u.Raw[:0], data...)
	return nil
}

// MarshalJSON writes the raw value back.
func (u Unsupported) MarshalJSON() ([]byte, error) {
	if len(bytes.TrimSpace(u.Raw)) == 0 {
		return []byte("null"), nil
	}
	return u.Raw, nil
}
