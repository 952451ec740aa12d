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
package cluster
