// Package nodeagentpolicy tests deploy/base/nodeagent-policy.yaml, the
// ValidatingAdmissionPolicy that confines each node agent to its node's
// VMIs, its own Node and events of its own, on a real kube-apiserver
// (test/cluster, control plane only: no kubelet is needed to issue a token
// bound to a Pod scheduled to a node, and Node objects are plain API
// objects). `kubectl apply -k deploy/` installs kemu as a user would; the
// test then writes with the node agent ServiceAccount's tokens — bound to
// Pods on node-a and node-b, to an unscheduled Pod, and not bound at all —
// and checks what the API server admits and refuses, and why (the policy
// or RBAC).
//
// The tests carry the build tag "cluster" and need make k8s (etcd,
// kube-apiserver, kubectl, kube-controller-manager); no root, no images:
//
//	go test -tags cluster -v ./test/nodeagentpolicy/
package nodeagentpolicy
