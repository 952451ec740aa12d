package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
)

// Cluster is how kemuctl's cluster commands connect: kubectl's connection
// flags (k8s.io/cli-runtime's ConfigFlags: --kubeconfig, --context,
// --cluster, --user, -n/--namespace, --token, -s/--server, --as, ...),
// defined once on the root command and read by every command that needs
// the cluster. Commands that do not call Config, Namespace or Clients
// work without any kubeconfig.
type Cluster struct {
	flags *genericclioptions.ConfigFlags
}

// NewCluster returns the connection flags, not yet added to a command.
func NewCluster() *Cluster {
	f := genericclioptions.NewConfigFlags(true)
	// kemuctl uses no discovery (nor its cache).
	f.CacheDir = nil
	return &Cluster{flags: f}
}

// AddFlags adds the connection flags to fs (the root's persistent flags).
func (c *Cluster) AddFlags(fs *pflag.FlagSet) { c.flags.AddFlags(fs) }

// Config is the client configuration the flags select, as kubectl's: the
// kubeconfig of --kubeconfig, else $KUBECONFIG, else ~/.kube/config (else
// the in-cluster config), with the other flags overriding it.
func (c *Cluster) Config() (*rest.Config, error) {
	if err := c.configured(); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg, err := c.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// ErrNoCluster: nothing says which cluster to use.
var ErrNoCluster = errors.New("no cluster configured (no kubeconfig in --kubeconfig, $KUBECONFIG or ~/.kube/config, no --server, not in a Pod)")

// configured refuses to fall back to kubectl's last resort,
// http://localhost:8080, when nothing names a cluster: kemuctl says so
// instead of reporting a refused connection.
func (c *Cluster) configured() error {
	if *c.flags.APIServer != "" || os.Getenv("KUBERNETES_MASTER") != "" {
		return nil
	}
	raw, err := c.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return err
	}
	if len(raw.Clusters) > 0 {
		return nil
	}
	if _, err := rest.InClusterConfig(); err == nil {
		return nil
	}
	return ErrNoCluster
}

// Namespace is -n, else the kubeconfig context's namespace, else "default"
// (in a Pod without a kubeconfig: the Pod's).
func (c *Cluster) Namespace() (string, error) {
	ns, _, err := c.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("kubeconfig: %w", err)
	}
	return ns, nil
}

// Clients are a command's connection to the cluster.
type Clients struct {
	Config    *rest.Config
	Kube      kubernetes.Interface
	Kemu      versioned.Interface
	Namespace string
}

// Clients connects: the configuration, both clientsets and the namespace.
func (c *Cluster) Clients() (*Clients, error) {
	cfg, err := c.Config()
	if err != nil {
		return nil, err
	}
	ns, err := c.Namespace()
	if err != nil {
		return nil, err
	}
	cl := &Clients{Config: cfg, Namespace: ns}
	if cl.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if cl.Kemu, err = versioned.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cl, nil
}

// ConnectionHelp says in a command's help how it finds the cluster.
const ConnectionHelp = `The cluster is kubectl's: the kubeconfig of --kubeconfig, else $KUBECONFIG,
else ~/.kube/config (or the in-cluster config), with --context, --server,
--token and the other connection flags ("Global Flags") overriding it; the
namespace is -n, else the kubeconfig context's, else default.`
