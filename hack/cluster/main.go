// Command cluster runs a throw-away Kubernetes on this machine for
// development and e2e work — the same control plane (and, with -nodes, the
// same nodes) the tests start through test/cluster — until SIGINT or
// SIGTERM, then stops exactly what it started. hack/cluster.sh runs it in
// the background and stops it by pid.
//
//	go run ./hack/cluster [-nodes N | -node] [-controller-manager] [-crds] [-kubeconfig PATH]
//
// It prints "KUBECONFIG=<path>", "DIR=<the cluster's folder>" and then
// "ready" once the API server (and the nodes) are ready. With -leftovers DIR
// it starts nothing and lists what the stopped cluster of that folder left
// behind.
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
	node := flag.Bool("node", false, "also run a node: -nodes 1")
	nodes := flag.Int("nodes", 0, "run this many nodes, each in its own namespaces with containerd, runc, CNI and a kubelet, and kube-scheduler (root)")
	cm := flag.Bool("controller-manager", false, "also run kube-controller-manager (implied by nodes)")
	crds := flag.Bool("crds", true, "install kemu's CRDs (deploy/base/crd)")
	out := flag.String("kubeconfig", "", "also copy the admin kubeconfig here")
	leftovers := flag.String("leftovers", "", "start nothing: list what the stopped cluster whose folder was this left on the machine (processes, mounts, the folder, network devices, cgroups) and exit 1 if anything")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cluster: unexpected arguments %v\n", flag.Args())
		return 2
	}
	if *leftovers != "" {
		left := cluster.Leftovers(*leftovers, "")
		for _, l := range left {
			fmt.Println(l)
		}
		if len(left) > 0 {
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *node && *nodes == 0 {
		*nodes = 1
	}
	c, err := cluster.Start(ctx, cluster.Options{Nodes: *nodes, ControllerManager: *cm,
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
	fmt.Printf("KUBECONFIG=%s\nDIR=%s\nBIN=%s\n", kubeconfig, c.Dir, c.BinDir)
	for _, n := range c.Nodes {
		// hack/cluster.sh prints these: where to import images.
		fmt.Printf("NODE=%s %s\n", n.Name, n.ContainerdSocket)
	}
	fmt.Println("ready")
	<-ctx.Done()
	return 0
}
