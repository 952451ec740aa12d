package verbs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// optimisticLockMsg starts the message of a write that lost a race
// (k8s.io/apiserver's registry.OptimisticLockErrorMsg; the test checks
// it): kemu-api read the VM, the controller wrote it meanwhile.
const optimisticLockMsg = "the object has been modified"

// apiStatus is the Kubernetes API status behind err: an API error as
// client-go returns it, also the one a failed WebSocket upgrade carries.
func apiStatus(err error) (apierrors.APIStatus, bool) {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se, true
	}
	var ue *httpstream.UpgradeFailureError
	if errors.As(err, &ue) && errors.As(ue.Cause, &se) {
		return se, true
	}
	return nil, false
}

// requestError says what went wrong with a request about the object kind
// ("VM" or "VMI") ns/name, as kemuctl says it: the object not found;
// kemu-api's refusal (409, the object's state does not allow the verb) by
// its reason, without Kubernetes' "Operation cannot be fulfilled on …"
// prefix; any other API error or failure as it came, after the object.
func requestError(kind, resource, ns, name string, err error) error {
	ref := fmt.Sprintf("%s %s/%s", kind, ns, name)
	st, ok := apiStatus(err)
	if !ok {
		return fmt.Errorf("%s: %w", ref, err)
	}
	s := st.Status()
	d := s.Details
	about := d != nil && d.Group == v1.GroupName && d.Kind == resource && d.Name == name
	switch {
	case s.Reason == metav1.StatusReasonNotFound && about:
		return fmt.Errorf("%s not found", ref)
	case s.Reason == metav1.StatusReasonConflict && about:
		// apierrors.NewConflict's message is this prefix and the cause.
		prefix := fmt.Sprintf("Operation cannot be fulfilled on %s %s: ",
			schema.GroupResource{Group: d.Group, Resource: d.Kind}, strconv.Quote(d.Name))
		if reason, ok := strings.CutPrefix(s.Message, prefix); ok {
			if strings.HasPrefix(reason, optimisticLockMsg) {
				return conflictError{ref}
			}
			return errors.New(reason)
		}
	case s.Reason == metav1.StatusReasonNotFound:
		// The path itself: kemu-api's group is not registered.
		return fmt.Errorf("%s: %s (is kemu-api, the APIService %s, available?)", ref, s.Message, subresources.APIServiceName)
	}
	return fmt.Errorf("%s: %s", ref, s.Message)
}

// conflictError: the object changed while kemu-api handled the request.
type conflictError struct{ ref string }

func (e conflictError) Error() string { return e.ref + " changed meanwhile, try again" }

// RequestError is requestError for other packages' commands (kemuctl
// top): the error of a request about the object kind ns/name as kemuctl
// says it.
func RequestError(kind, resource, ns, name string, err error) error {
	return requestError(kind, resource, ns, name, err)
}
