// kemu-api is kemu's API extension, as KubeVirt's virt-api: the
// aggregated API subresources.kemu.dev (console and VNC streams, pause,
// unpause, soft reboot, guest reports, migrate, VM start/stop/restart) and
// the admission webhooks of VMIs, VMs and migrations. Authentication and
// authorization are delegated to kube-apiserver; its serving certificate
// is its own (apiserver/certs). SIGTERM ends open streams with a close
// frame saying so and shuts the server down gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/apiserver/certs"
	"github.com/kemu-dev/kemu/apiserver/nodeclient"
	"github.com/kemu-dev/kemu/apiserver/server"
	"github.com/kemu-dev/kemu/apiserver/subresource"
	"github.com/kemu-dev/kemu/kube/instancetypes"
	"github.com/kemu-dev/kemu/kube/nodeapi"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// WebhookConfigurationName names kemu-api's mutating and validating
// webhook configurations (deploy/base/webhooks.yaml).
const WebhookConfigurationName = "kemu-api"

type options struct {
	kubeconfig   string
	namespace    string
	service      string
	apiService   string
	webhooks     string
	certInterval time.Duration
	qps          float64
	burst        int
	server       *server.Options
	webhookPaths []string
	showVersion  bool
	// hostDiskDirs are kemu-config's hostDiskDirs: hostDisks elsewhere
	// are refused at admission, as the controller refuses them.
	hostDiskDirs []string
}

func main() { os.Exit(run()) }

func run() int {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kemu-api:", err)
		return 2
	}
	if o.showVersion {
		fmt.Println("kemu-api", version)
		return 0
	}
	defer klog.Flush()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serve(ctx, o); err != nil {
		klog.ErrorS(err, "kemu-api failed")
		return 1
	}
	klog.InfoS("kemu-api stopped")
	return 0
}

func parseFlags(args []string) (*options, error) {
	o := &options{webhookPaths: webhookPaths()}
	o.server = server.NewOptions(o.webhookPaths)
	fs := pflag.NewFlagSet("kemu-api", pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of kemu-api's own client (default: in-cluster config)")
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "kemu-system"
	}
	fs.StringVar(&o.namespace, "namespace", ns, "kemu's namespace: kemu-api's Service and certificates Secret, the node agents, the node CA")
	fs.StringVar(&o.service, "service-name", "kemu-api", "kemu-api's Service (its serving certificate's names)")
	fs.StringVar(&o.apiService, "apiservice", subresources.APIServiceName, "the APIService to write the CA bundle into (empty: none)")
	fs.StringVar(&o.webhooks, "webhook-configuration", WebhookConfigurationName, "the mutating and validating webhook configurations to write the CA bundle into (empty: none)")
	fs.DurationVar(&o.certInterval, "cert-check-interval", time.Minute, "how often the certificates are checked for renewal and the CA bundle rewritten")
	fs.Float64Var(&o.qps, "kube-api-qps", 50, "API requests per second")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "API request burst")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	var hostDiskDirs string
	fs.StringVar(&hostDiskDirs, "host-disk-dirs", "", "node directories hostDisks may live under, comma-separated (kemu-config "+validation.HostDiskDirsKey+"); empty: every hostDisk is refused at admission")
	o.server.AddFlags(fs)
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	fs.AddGoFlagSet(gfs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if o.namespace == "" || o.service == "" {
		return nil, errors.New("--namespace and --service-name are required")
	}
	var err error
	if o.hostDiskDirs, err = validation.ParseHostDiskDirs(hostDiskDirs); err != nil {
		return nil, fmt.Errorf("--host-disk-dirs: %w", err)
	}
	if err := o.server.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

func restConfig(o *options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = "kemu-api/" + version
	return cfg, nil
}

func serve(ctx context.Context, o *options) error {
	cfg, err := restConfig(o)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kemu, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}

	certMgr := certs.NewManager(kube, o.namespace, o.service)
	if err := certMgr.Ensure(ctx); err != nil {
		return err
	}
	inject := certs.Injector{Dynamic: dyn, APIService: o.apiService, MutatingWebhooks: o.webhooks, ValidatingWebhooks: o.webhooks}
	go certMgr.Run(ctx, o.certInterval, inject.Inject)

	factory := informers.NewSharedInformerFactoryWithOptions(kube, 10*time.Minute, informers.WithNamespace(o.namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = nodeapi.AgentLabel }))
	// The lister registers the informer: before Start, or it never runs.
	nodeAgentPods := factory.Core().V1().Pods().Lister().Pods(o.namespace)
	// kemu-api's client certificate for the node agents; until it is
	// issued, console, vnc and the guest reports answer 503.
	identity := &nodeclient.Identity{}
	go func() {
		if err := identity.Run(ctx, kube, o.namespace); err != nil {
			klog.ErrorS(err, "kemu-api's node client certificate")
		}
	}()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer cache for %v did not sync", typ)
		}
	}

	handler := &subresource.Handler{
		Kemu:     kemu,
		Nodes:    &nodeclient.Client{Pods: nodeAgentPods, Creds: identity},
		Version:  version,
		Stopping: ctx.Done(),
	}
	srv, err := server.New(o.server, server.Config{
		Cert:         certMgr,
		Subresources: handler,
		Webhooks:     webhookHandlers(o.namespace, o.hostDiskDirs, kube, &instancetypes.Lookup{Kube: kube, Kemu: kemu}),
	})
	if err != nil {
		return err
	}
	klog.InfoS("kemu-api serving", "version", version, "port", o.server.SecureServing.BindPort)
	return srv.Run(ctx)
}
