// Package apiservertest runs kemu-api in the test process against a test
// cluster's real kube-apiserver (test/cluster): its server on a host
// address kube-apiserver can reach, a Service without selector whose
// EndpointSlice names that address (kube-apiserver runs with
// --enable-aggregator-routing), the APIService, and the serving
// certificates and CA bundle through apiserver/certs as in a cluster.
// Requests then go through kube-apiserver's aggregation layer, with its
// authentication and authorization, exactly as kemuctl's do.
package apiservertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/apiserver/certs"
	"github.com/kemu-dev/kemu/apiserver/server"
	"github.com/kemu-dev/kemu/apiserver/subresource"
	"github.com/kemu-dev/kemu/test/cluster"
)

// Namespace and Service of the test kemu-api.
const (
	Namespace = "kemu-system"
	Service   = "kemu-api"
)

// Options change what the instance serves.
type Options struct {
	// Nodes reaches node agents (nil: console, vnc and guest reports
	// fail with 503).
	Nodes subresource.NodeAgents
	// Webhooks are mounted as given (paths → handlers); their
	// configurations are the test's.
	Webhooks map[string]http.Handler
	// WebhookConfiguration names the webhook configurations to inject the
	// CA bundle into (empty: none).
	WebhookConfiguration string
}

// Instance is a running kemu-api.
type Instance struct {
	// Addr is where it listens (host:port).
	Addr string
	// Certs is its certificate manager (CABundle for webhook tests).
	Certs *certs.Manager
	stop  context.CancelFunc
	done  chan error
}

// Start runs kemu-api for cluster c and waits until kube-apiserver serves
// its discovery through the aggregation layer.
func Start(ctx context.Context, c *cluster.Cluster, o Options) (*Instance, error) {
	cfg := c.RESTConfig()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kemu, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ip, err := hostIP()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("kemu-api listener: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := register(ctx, kube, dyn, ip, port); err != nil {
		ln.Close()
		return nil, err
	}

	mgr := certs.NewManager(kube, Namespace, Service)
	if err := mgr.Ensure(ctx); err != nil {
		ln.Close()
		return nil, err
	}
	inj := certs.Injector{Dynamic: dyn, APIService: subresources.APIServiceName,
		MutatingWebhooks: o.WebhookConfiguration, ValidatingWebhooks: o.WebhookConfiguration}

	paths := make([]string, 0, len(o.Webhooks))
	for p := range o.Webhooks {
		paths = append(paths, p)
	}
	opts := server.NewOptions(paths)
	opts.SecureServing.Listener = ln
	opts.SecureServing.BindAddress = ip
	opts.SecureServing.BindPort = port
	opts.Authentication.RemoteKubeConfigFile = c.Kubeconfig
	opts.Authorization.RemoteKubeConfigFile = c.Kubeconfig
	// No caches: tests change RBAC and expect the next request to see it.
	opts.Authentication.CacheTTL = 0
	opts.Authorization.AllowCacheTTL, opts.Authorization.DenyCacheTTL = 0, 0

	runCtx, stop := context.WithCancel(context.Background())
	nodes := o.Nodes
	if nodes == nil {
		nodes = noNodes{}
	}
	srv, err := server.New(opts, server.Config{
		Cert:         mgr,
		Subresources: &subresource.Handler{Kemu: kemu, Nodes: nodes, Version: "test", Stopping: runCtx.Done()},
		Webhooks:     o.Webhooks,
	})
	if err != nil {
		stop()
		ln.Close()
		return nil, err
	}
	in := &Instance{Addr: ln.Addr().String(), Certs: mgr, stop: stop, done: make(chan error, 1)}
	go mgr.Run(runCtx, 2*time.Second, inj.Inject)
	go func() { in.done <- srv.Run(runCtx) }()

	// Ready when kube-apiserver serves the group's discovery.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := kube.Discovery().ServerResourcesForGroupVersion(subresources.GroupVersion)
		return err == nil, nil
	})
	if err != nil {
		_ = in.Stop()
		return nil, fmt.Errorf("kube-apiserver did not serve %s through kemu-api: %w", subresources.GroupVersion, err)
	}
	return in, nil
}

// Stop shuts kemu-api down and waits for it.
func (in *Instance) Stop() error {
	in.stop()
	select {
	case err := <-in.done:
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case <-time.After(90 * time.Second):
		return errors.New("kemu-api did not stop within 90s")
	}
}

// register creates the namespace, the Service, its endpoints and the
// APIService.
func register(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, ip net.IP, port int) error {
	ignoreExists := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Service},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(port))}}},
	}
	if _, err := kube.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kemu-api Service: %w", err)
	}
	name, proto, p32, ready := "https", corev1.ProtocolTCP, int32(port), true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: Namespace, Name: Service + "-test", Labels: map[string]string{discoveryv1.LabelServiceName: Service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &p32}},
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kemu-api EndpointSlice: %w", err)
	}
	apisvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": subresources.APIServiceName},
		"spec": map[string]any{
			"group": subresources.Group, "version": subresources.Version,
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"namespace": Namespace, "name": Service, "port": int64(443)},
		},
	}}
	if _, err := dyn.Resource(certs.APIServices).Create(ctx, apisvc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("APIService: %w", err)
	}
	return nil
}

// hostIP is an address of this host that is not loopback (Endpoints may
// not name loopback addresses) and that kube-apiserver, on this host,
// reaches.
func hostIP() (net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() && !n.IP.IsLoopback() {
			return n.IP.To4(), nil
		}
	}
	return nil, errors.New("no non-loopback IPv4 address on this host for kemu-api's endpoints")
}

// noNodes answers every node request with 503.
type noNodes struct{}

func (noNodes) Stream(context.Context, *v1.VirtualMachineInstance, string) (io.ReadWriteCloser, error) {
	return nil, apierrors.NewServiceUnavailable("no node agents in this test")
}

func (noNodes) Get(context.Context, *v1.VirtualMachineInstance, string, any) error {
	return apierrors.NewServiceUnavailable("no node agents in this test")
}
