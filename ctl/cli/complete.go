package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// completeTimeout bounds the listing behind one completion: a shell waits
// for it on every Tab.
const completeTimeout = 5 * time.Second

// CompleteVMIs is the ValidArgsFunction of the VMI verbs: the names of the
// VMIs in the namespace the connection flags select.
func (c *Cluster) CompleteVMIs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return c.completeList(cmd, toComplete, func(ctx context.Context, cl *Clients) (runtime.Object, error) {
		return cl.Kemu.KemuV1alpha1().VirtualMachineInstances(cl.Namespace).List(ctx, metav1.ListOptions{})
	})
}

// CompleteVMs is the ValidArgsFunction of the VM verbs: the names of the
// VMs in the namespace the connection flags select.
func (c *Cluster) CompleteVMs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return c.completeList(cmd, toComplete, func(ctx context.Context, cl *Clients) (runtime.Object, error) {
		return cl.Kemu.KemuV1alpha1().VirtualMachines(cl.Namespace).List(ctx, metav1.ListOptions{})
	})
}

// completeNamespaces completes --namespace.
func (c *Cluster) completeNamespaces(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return c.completeList(cmd, toComplete, func(ctx context.Context, cl *Clients) (runtime.Object, error) {
		return cl.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	})
}

// completeKubeconfig completes --context, --cluster or --user from the
// kubeconfig (no request).
func (c *Cluster) completeKubeconfig(kind string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		raw, err := c.flags.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		switch kind {
		case "context":
			for n := range raw.Contexts {
				names = append(names, n)
			}
		case "cluster":
			for n := range raw.Clusters {
				names = append(names, n)
			}
		case "user":
			for n := range raw.AuthInfos {
				names = append(names, n)
			}
		}
		return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// registerFlagCompletions completes the connection flags that name
// something: --namespace (from the cluster), --context, --cluster, --user
// (from the kubeconfig).
func (c *Cluster) registerFlagCompletions(root *cobra.Command) {
	for name, f := range map[string]cobra.CompletionFunc{
		"namespace": c.completeNamespaces,
		"context":   c.completeKubeconfig("context"),
		"cluster":   c.completeKubeconfig("cluster"),
		"user":      c.completeKubeconfig("user"),
	} {
		if err := root.RegisterFlagCompletionFunc(name, f); err != nil {
			panic(err) // a flag of ConfigFlags went missing: a programming error
		}
	}
}

// completeList connects and lists; a cluster that cannot be reached
// completes nothing (a shell has no place for the error).
func (c *Cluster) completeList(cmd *cobra.Command, toComplete string,
	list func(context.Context, *Clients) (runtime.Object, error)) ([]cobra.Completion, cobra.ShellCompDirective) {
	cl, err := c.Clients()
	if err != nil {
		cobra.CompDebugln("kemuctl: "+err.Error(), false)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	l, err := list(ctx, cl)
	var names []string
	if err == nil {
		names, err = objectNames(l)
	}
	if err != nil {
		cobra.CompDebugln("kemuctl: "+err.Error(), false)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// objectNames are the names of a list's items.
func objectNames(list runtime.Object) ([]string, error) {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(items))
	for _, o := range items {
		a, err := meta.Accessor(o)
		if err != nil {
			return nil, err
		}
		names = append(names, a.GetName())
	}
	return names, nil
}

// withPrefix keeps the names starting with prefix, sorted.
func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
