// Command cluster runs a throw-away Kubernetes on this machine for
// development and e2e work — the same control plane (and, with -node, the
// same single node) the tests start through test/cluster — until SIGINT or
// SIGTERM, then stops exactly what it started. hack/cluster.sh runs it in
// the background and stops it by pid.
//
//	go run ./hack/cluster [-node] [-controller-manager] [-crds] [-kubeconfig PATH]
//
// It prints "KUBECONFIG=<path>" and then "ready" once the API server (and
// the node) are ready.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/kemu-dev/kemu/test/cluster"
)

func main() { os.Exit(run()) }

func run() int {
	node := flag.Bool("node", false, "also run a node: containerd, runc, CNI, kube-scheduler, kubelet (root)")
	cm := flag.Bool("controller-manager", false, "also run kube-controller-manager (implied by -node)")
	crds := flag.Bool("crds", true, "install kemu's CRDs (deploy/crd)")
	out := flag.String("kubeconfig", "", "also copy the admin kubeconfig here")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cluster: unexpected arguments %v\n", flag.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Start(ctx, cluster.Options{Node: *node, ControllerManager: *cm || *node,
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		return 1
	}
	code := serve(ctx, c, *crds, *out)
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster: stop:", err)
		code = 1
	}
	fmt.Fprintln(os.Stderr, "cluster: stopped")
	return code
}

func serve(ctx context.Context, c *cluster.Cluster, crds bool, out string) int {
	kubeconfig := c.Kubeconfig
	if out != "" {
		b, err := os.ReadFile(c.Kubeconfig)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(out), 0o755)
		}
		if err == nil {
			err = os.WriteFile(out, b, 0o600)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "cluster: kubeconfig:", err)
			return 1
		}
		kubeconfig = out
	}
	if crds {
		if err := c.InstallCRDs(); err != nil {
			fmt.Fprintln(os.Stderr, "cluster:", err)
			return 1
		}
	}
	fmt.Printf("KUBECONFIG=%s\nready\n", kubeconfig)
	<-ctx.Done()
	return 0
}
