//go:build tools

// Package tools pins Multus's thin plugin for hack/multus/build.sh.
package tools

import _ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"
