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
// # A node
//
// Options.Node adds a real single node on this machine (root only, Linux):
// Debian's containerd with runc (through a wrapper that turns negative
// oomScoreAdj into 0, for hosts without CAP_SYS_RESOURCE) and a CNI bridge,
// kube-controller-manager, kube-scheduler and a kubelet (cgroupfs driver,
// cgroup v1 allowed, anonymous access with AlwaysAllow). Everything
// configurable lives in the temp folder: containerd's root, state and socket,
// runc's state, the CNI config and IPAM state, the kubelet's --root-dir
// (Cluster.KubeletRootDir: pod volumes are at
// <KubeletRootDir>/pods/<uid>/volumes/...) and pod logs. The kubelet's
// device-plugin folder is fixed by the kubelet at
// /var/lib/kubelet/device-plugins (Cluster.DevicePluginDir). The images
// PauseImage (the sandbox) and BusyboxImage are built offline by hack/images
// and imported before Start returns; pods use imagePullPolicy Never or
// IfNotPresent.
//
// One node runs per machine: Start takes an exclusive flock on
// DefaultNodeLock (waiting up to Options.NodeLockTimeout, so test packages
// that run in parallel take turns) and holds it until Stop. The lock file
// records what the machine looked like before; Stop kills the pods'
// processes, the kubelet, containerd and its shims, unmounts everything
// below the temp folder, removes the pods' network namespaces, the kubepods
// cgroups, the CNI bridge and what the node wrote outside the folder, and
// restores the sysctls the kubelet changes. If a test process dies without
// Stop, the next node start does that cleanup from the record.
package cluster
