//go:build tools

// Package containerd pins the containerd the test cluster's nodes run
// (hack/k8s/build.sh builds it into _out/k8s/bin): 2.x, for the kubelet's
// image volumes, which containerd 1.x (Debian 12's 1.6) does not mount.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
