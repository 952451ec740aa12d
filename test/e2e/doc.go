// Package e2e is kemu's end-to-end suite: a real single-node Kubernetes on
// this machine (test/cluster with a node: kubelet, containerd, runc, CNI),
// the kemu images imported and deploy/ applied with kubectl, then VMIs and
// VMs driven as a user would, with kubectl and kemuctl.
//
// The tests carry the build tags "cluster" and "qemu" and need root, the
// Kubernetes binaries (make k8s), the kemu images (make images) and the test
// guest's images (make testguest):
//
//	go test -race -count=1 -tags 'cluster qemu' -timeout 30m ./test/e2e/
//	go test -count=1 -tags 'cluster qemu' -run '^$' -bench CreateToRunning -benchtime 1x ./test/e2e/
//
// See docs/e2e.md.
package e2e
