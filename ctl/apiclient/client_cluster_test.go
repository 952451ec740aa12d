//go:build cluster

package apiclient_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/apiserver/apiservertest"
	"github.com/kemu-dev/kemu/ctl/apiclient"
	"github.com/kemu-dev/kemu/test/cluster"
)

// echoNodes stands in for the node agent (the real one is in the e2e
// suite): each stream echoes what it gets. What this test proves is the
// path from the client through kube-apiserver's upgrade proxy to kemu-api
// and kemu-api's end of the stream.
type echoNodes struct{ opened chan string }

func (e echoNodes) Stream(_ context.Context, vmi *v1.VirtualMachineInstance, verb string) (io.ReadWriteCloser, error) {
	a, b := net.Pipe()
	go func() { _, _ = io.Copy(b, b) }()
	e.opened <- verb + " " + vmi.Name
	return a, nil
}

func (echoNodes) Get(context.Context, *v1.VirtualMachineInstance, string, any) error { return nil }

// TestStreamThroughKubeAPIServer opens a console through a real
// kube-apiserver and kemu-api in process, echoes bytes, then stops kemu-api
// and reads the close frame's reason. Needs make k8s.
func TestStreamThroughKubeAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.StartWithCRDs(ctx, t)
	nodes := echoNodes{opened: make(chan string, 4)}
	in, err := apiservertest.Start(ctx, c, apiservertest.Options{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = in.Stop()
		}
	})
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	mem := resource.MustParse("128Mi")
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "echo"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain:  v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}},
			Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/disk:1"}}},
		},
	}
	if vmi, err = kemu.KemuV1alpha1().VirtualMachineInstances("default").Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi.Status.Phase, vmi.Status.NodeName = v1.Running, "node-a"
	if _, err = kemu.KemuV1alpha1().VirtualMachineInstances("default").UpdateStatus(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	cl, err := apiclient.New(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	v, err := cl.Version(ctx)
	if err != nil || v.GitVersion != "test" {
		t.Fatalf("version: %+v %v", v, err)
	}
	conn, err := cl.Stream(ctx, subresources.Console, "default", "echo")
	if err != nil {
		t.Fatal(err)
	}
	if got := <-nodes.opened; got != "console echo" {
		t.Fatalf("node stream %q", got)
	}
	for _, msg := range []string{"hello\r", strings.Repeat("x", 100000)} {
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo of %d bytes: %v (%q…)", len(msg), err, buf[:min(len(buf), 20)])
		}
	}

	// kemu-api going away ends the stream with a reason.
	stopped = true
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Read(make([]byte, 16))
	var ce *apiclient.ClosedError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "kemu-api is shutting down") {
		t.Fatalf("read after kemu-api stopped: %v, want a close saying kemu-api is shutting down", err)
	}
	_ = conn.Close()
}
