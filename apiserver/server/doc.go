// Package server is kemu-api's HTTPS server: k8s.io/apiserver's generic
// API server (delegated authentication and authorization against
// kube-apiserver, audit, panic recovery, in-flight limits, health
// endpoints, graceful shutdown) serving the aggregated API
// subresources.kemu.dev (its discovery and the subresource handler) and
// the admission webhooks, with the serving certificate from
// apiserver/certs.
package server
