// Package admission is kemu-api's admission webhooks for kemu.dev/v1alpha1:
// http.Handlers speaking admission.k8s.io/v1 AdmissionReview, one per
// webhook path (Paths), built by Handlers. They call the defaulting of
// api/v1alpha1 and the validation of api/validation, the same entry points
// the controller and kemuctl use, so an object is judged one way everywhere.
//
//   - The VMI mutator stores the defaults on CREATE (a JSON patch of spec).
//   - The VMI validator refuses a VMI that validation refuses (every error
//     with its field path), any change of a VMI's spec, and changes of the
//     request annotations by anyone but kemu's own service accounts.
//   - The VM validator validates the template under spec.template.spec.
//   - The VMIM validator refuses what the migration controller would, and
//     any change of the spec.
package admission
