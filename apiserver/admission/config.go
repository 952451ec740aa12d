package admission

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/kemu-dev/kemu/kube/instancetypes"
)

// Defaults of Config: where deploy/ installs kemu and the service accounts
// of its components.
const (
	DefaultNamespace = "kemu-system"
)

// DefaultServiceAccounts are kemu's components that may change the request
// annotations (kemu-api, the controller, the node agent).
var DefaultServiceAccounts = []string{"kemu-api", "kemu-controller", "kemu-nodeagent"}

// Config is what the webhooks need from kemu-api's configuration.
type Config struct {
	// Namespace is kemu's namespace (DefaultNamespace if empty).
	Namespace string
	// ServiceAccounts are kemu's service accounts in Namespace that may
	// change the VMI request annotations (DefaultServiceAccounts if nil).
	ServiceAccounts []string
	// HostDiskDirs, when set, returns the node directories hostDisks may
	// live under (kemu-config's host-disk-dirs): the controller's cluster
	// policy, applied at admission too. Nil leaves that check to the
	// controller.
	HostDiskDirs func() []string
	// Authorize, when set, asks kube-apiserver for the requesting user's
	// rights (serviceAccount volumes: serviceAccountAccess). Nil skips the
	// check.
	Authorize Authorizer
	// Instancetypes, when set, reads the instance types, preferences,
	// revisions and claims a VM refers to, so a VM conflicting with its
	// instance type is refused at create. Nil leaves that to the VM
	// controller.
	Instancetypes *instancetypes.Lookup
	// CDIInstalled, when set, says whether CDI's API is installed: a VM
	// with dataVolumeTemplates is refused without it, naming
	// spec.dataVolumeTemplates. Nil leaves that to the VM controller.
	CDIInstalled func(context.Context) (bool, error)
}

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.ServiceAccounts == nil {
		c.ServiceAccounts = DefaultServiceAccounts
	}
	return c
}

// privileged reports whether username is one of kemu's service accounts.
func (c Config) privileged(username string) bool {
	return slices.ContainsFunc(c.ServiceAccounts, func(sa string) bool {
		return username == serviceAccountUsername(c.Namespace, sa)
	})
}

// serviceAccountUsername is how kube-apiserver names a service account's
// user (k8s.io/apiserver/pkg/authentication/serviceaccount.MakeUsername).
func serviceAccountUsername(namespace, name string) string {
	return fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name)
}

// Handlers returns the webhooks by path (Paths), for kemu-api's mux.
func Handlers(cfg Config) map[string]http.Handler {
	cfg = cfg.withDefaults()
	return map[string]http.Handler{
		PathMutateVMI:    &webhook{name: "mutate-vmi", admit: mutateVMI},
		PathValidateVMI:  &webhook{name: "validate-vmi", admit: cfg.validateVMI},
		PathValidateVM:   &webhook{name: "validate-vm", admit: cfg.validateVMWithAccess},
		PathValidateVMIM: &webhook{name: "validate-vmim", admit: validateVMIM},
	}
}
