// Package deploy tests kemu's images (hack/images, make images) and its
// kustomize deployment (deploy/) on a real node (test/cluster with
// Options.Node): the images are imported into the node's containerd,
// `kubectl apply -k` installs kemu, the controller Deployment becomes
// Available and the node agent DaemonSet Ready, the node gets
// kemu.dev/schedulable=true, a VMI runs in a launcher Pod made by the
// controller from the launcher image, and `kubectl delete -k` removes it all.
//
// The tests carry the build tag "cluster" and need root, make k8s, make
// testguest and make deps (they build the images themselves when
// _out/images is stale, with hack/images/build.sh):
//
//	go test -tags cluster -v ./test/deploy/
package deploy
