package admission

import (
	"context"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// AccessTimeout bounds the SubjectAccessReviews of one admission request.
const AccessTimeout = 10 * time.Second

// Authorizer asks kube-apiserver whether the requesting user may do attrs
// (a SubjectAccessReview); reason is the authorizer's when it is not.
type Authorizer func(ctx context.Context, user authorizationv1.SubjectAccessReviewSpec) (allowed bool, reason string, err error)

// serviceAccountAccess refuses a serviceAccount volume whose ServiceAccount
// the requesting user could not use on their own: the volume hands its
// token to the guest, so a VMI's author needs what a Pod's author needs to
// run as it — create Pods in the namespace — or the right to request its
// tokens (create serviceaccounts/token). kemu's own service accounts (the
// VM controller creating a VM's VMI) are not asked: the VM was checked.
func (c Config) serviceAccountAccess(req *admissionv1.AdmissionRequest, spec *v1.VirtualMachineInstanceSpec, p *field.Path) field.ErrorList {
	if c.Authorize == nil || c.privileged(req.UserInfo.Username) {
		return nil
	}
	var errs field.ErrorList
	for i, vol := range spec.Volumes {
		if vol.ServiceAccount == nil || vol.ServiceAccount.ServiceAccountName == "" {
			continue
		}
		sa := vol.ServiceAccount.ServiceAccountName
		fp := p.Child("volumes").Index(i).Child("serviceAccount", "serviceAccountName")
		ctx, cancel := context.WithTimeout(context.Background(), AccessTimeout)
		ok, reason, err := c.mayUseServiceAccount(ctx, req, sa)
		cancel()
		switch {
		case err != nil:
			errs = append(errs, field.InternalError(fp, fmt.Errorf("asking whether %q may use ServiceAccount %q: %w", req.UserInfo.Username, sa, err)))
		case !ok:
			errs = append(errs, field.Forbidden(fp, fmt.Sprintf(
				"user %q may neither create Pods in namespace %q nor create tokens of ServiceAccount %q, and the volume gives its token to the guest%s",
				req.UserInfo.Username, req.Namespace, sa, reasonSuffix(reason))))
		}
	}
	return errs
}

func (c Config) mayUseServiceAccount(ctx context.Context, req *admissionv1.AdmissionRequest, sa string) (bool, string, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range req.UserInfo.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	var reasons string
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Namespace: req.Namespace, Verb: "create", Resource: "pods"},
		{Namespace: req.Namespace, Verb: "create", Resource: "serviceaccounts", Subresource: "token", Name: sa},
	} {
		ok, reason, err := c.Authorize(ctx, authorizationv1.SubjectAccessReviewSpec{
			ResourceAttributes: &attrs, User: req.UserInfo.Username, Groups: req.UserInfo.Groups, UID: req.UserInfo.UID, Extra: extra,
		})
		if err != nil || ok {
			return ok, "", err
		}
		reasons += reason
	}
	return false, reasons, nil
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

// validateVMWithAccess is validateVM and, for a VM whose template has a
// serviceAccount volume, serviceAccountAccess.
func (c Config) validateVMWithAccess(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := c.validateVM(req)
	if !resp.Allowed || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return resp
	}
	var vm, old v1.VirtualMachine
	if err := decode(req.Object, "object", &vm); err != nil {
		return deny(err)
	}
	if req.Operation == admissionv1.Update {
		if err := decode(req.OldObject, "oldObject", &old); err != nil {
			return deny(err)
		}
		if apiequality.Semantic.DeepEqual(old.Spec.Template, vm.Spec.Template) {
			return resp
		}
	}
	if vm.Spec.Template == nil {
		return resp
	}
	return invalid(vmKind, req.Name, c.serviceAccountAccess(req, &vm.Spec.Template.Spec, field.NewPath("spec", "template", "spec")))
}
