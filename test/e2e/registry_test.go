//go:build cluster && qemu

package e2e

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// podGateway is the node's address on test/cluster's pod network (the CNI
// bridge's gateway, the first address of its 10.244.222.0/24), where Pods
// reach the node. ggcr — the launcher's image client — talks plain HTTP to
// RFC 1918 registries.
const podGateway = "10.244.222.1"

// serveKernelBootImage starts an in-memory registry on the node holding the
// test guest's kernelboot image and returns the reference launcher Pods
// pull it by.
//
// Why: the launcher Pod does not get firmware.kernelBoot.container images
// from the kubelet (controller/template renders no init container for
// them, unlike containerDisks); kemu-launcher pulls them itself from a
// registry (launcher/storage kernelBoot → launcher/images), so an image
// that exists only in the node's containerd (kemu.local/...) cannot boot.
func serveKernelBootImage(t *testing.T, ev *env) string {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(discard{}, "", 0)))}
	go srv.Serve(l) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	port := l.Addr().(*net.TCPAddr).Port

	tag, err := name.NewTag(kernelBootImage)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(filepath.Join(ev.root, "_out/testguest/oci/kernelboot.docker.tar"), &tag)
	if err != nil {
		t.Fatal(err)
	}
	push, err := name.NewTag(fmt.Sprintf("127.0.0.1:%d/testguest/kernelboot:latest", port))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(push, img); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s:%d/testguest/kernelboot:latest", podGateway, port)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
