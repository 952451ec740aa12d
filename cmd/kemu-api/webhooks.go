package main

import (
	"net/http"

	"github.com/kemu-dev/kemu/apiserver/admission"
	"github.com/kemu-dev/kemu/kube/instancetypes"
)

// webhookPaths are the admission paths (not authorized: kube-apiserver
// calls webhooks without credentials).
func webhookPaths() []string { return admission.Paths }

func webhookHandlers(namespace string, lookup *instancetypes.Lookup) map[string]http.Handler {
	return admission.Handlers(admission.Config{Namespace: namespace, Instancetypes: lookup})
}
