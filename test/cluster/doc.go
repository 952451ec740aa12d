// Package cluster starts a real, throw-away Kubernetes control plane (etcd +
// kube-apiserver, optionally kube-controller-manager) on loopback for
// integration and e2e tests.
//
// The binaries are built from the Go module proxy by hack/k8s/build.sh into
// <repo root>/_out/k8s/bin; KEMU_K8S_BIN overrides that folder.
//
// The package itself has no build tag so it always compiles; tests that start
// a cluster carry the build tag "cluster" and run with
//
//	hack/k8s/build.sh && go test -tags cluster ./test/cluster/...
//
// Several tests of one package should share one cluster from TestMain:
//
//	var c *cluster.Cluster
//
//	func TestMain(m *testing.M) {
//		var err error
//		c, err = cluster.Start(context.Background(), cluster.Options{})
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		c.Stop()
//		os.Exit(code)
//	}
//
// Every process is started in its own process group with a parent-death
// signal (SIGKILL), so an aborted test binary does not leave etcd or
// kube-apiserver behind; Stop kills the groups and removes the temp folder.
//
// # Nodes
//
// Options.Nodes adds N real nodes on this machine (root only, Linux), each in
// its own network, mount and UTS namespaces (docs/development.md, "The test
// cluster's nodes"): Debian's containerd with runc (through a wrapper that
// turns negative oomScoreAdj into 0, for hosts without CAP_SYS_RESOURCE), a
// CNI bridge and a kubelet (cgroupfs driver, its own cgroup root, cgroup v1
// allowed, anonymous access with AlwaysAllow), and kube-controller-manager
// and kube-scheduler for all. Inside every node the paths are a real node's
// (/var/lib/kubelet, /var/lib/kemu, /var/log/pods); Node.HostPath and
// Node.ProcPath say where the host sees them. The images PauseImage (the
// sandbox) and BusyboxImage are built offline by hack/images and imported
// before Start returns; pods use imagePullPolicy Never or IfNotPresent.
// Node.Stop fails a node (everything on it dies at once) and Node.Start
// brings it back.
//
// One cluster with nodes runs per machine: Start takes an exclusive flock on
// DefaultNodeLock (waiting up to Options.NodeLockTimeout, so test packages
// that run in parallel take turns) and holds it until Stop. The lock file
// records what the nodes will create on the host (bridge, veths, cgroup
// roots) and the sysctls before; Stop kills the nodes' processes, which
// takes their namespaces with every mount and network device in them,
// removes what the record names and restores the sysctls. If a test process
// dies without Stop, the next start does that cleanup from the record.
// Leftovers checks that nothing is left.
package cluster
