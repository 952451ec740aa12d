package main

import (
	"context"
	"net/http"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/apiserver/admission"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/kube/instancetypes"
)

// cdiProbeTTL: how long the VM admission trusts its last answer on
// whether CDI's API is installed.
const cdiProbeTTL = 30 * time.Second

// webhookPaths are the admission paths (not authorized: kube-apiserver
// calls webhooks without credentials).
func webhookPaths() []string { return admission.Paths }

func webhookHandlers(namespace string, hostDiskDirs []string, kube kubernetes.Interface, lookup *instancetypes.Lookup) map[string]http.Handler {
	return admission.Handlers(admission.Config{Namespace: namespace, Authorize: subjectAccessReview(kube), Instancetypes: lookup,
		HostDiskDirs: func() []string { return hostDiskDirs },
		CDIInstalled: (&cdi.Probe{Discovery: kube.Discovery(), TTL: cdiProbeTTL}).Installed})
}

// subjectAccessReview asks kube-apiserver what a requesting user may do
// (kemu-api is bound to system:auth-delegator, deploy/base/kemu-api-rbac.yaml).
func subjectAccessReview(kube kubernetes.Interface) admission.Authorizer {
	return func(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (bool, string, error) {
		r, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return false, "", err
		}
		return r.Status.Allowed, r.Status.Reason, nil
	}
}
