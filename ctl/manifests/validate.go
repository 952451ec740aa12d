package manifests

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/ctl/cli"
)

// Where validate --for judges an object for.
const (
	ForRun     = "run"
	ForCluster = "cluster"
)

// NewValidateCommand is kemuctl validate.
func NewValidateCommand() *cobra.Command {
	forWhere := ForRun
	cmd := &cobra.Command{
		Use:   "validate [--for run|cluster] FILE...",
		Short: "Check kemu or KubeVirt manifests (YAML or JSON) and print every error with its field path",
		Long: `validate reads each FILE ("-" for standard input), which may hold several
YAML documents, JSON, or a List, of kemu.dev/v1alpha1 or kubevirt.io/v1 (or v1alpha3)
VirtualMachineInstance, VirtualMachine and VirtualMachineInstanceMigration
objects and instancetype.kemu.dev/v1beta1 or instancetype.kubevirt.io/v1beta1
instance types and preferences. It applies kemu's defaults and prints every problem with its field
path. The exit status is 1 if any document has an error.

--for says where the objects are to run: "run" (the default) checks what
kemuctl run accepts; "cluster" also refuses what kemu's admission refuses on a
cluster beyond that: local image references (oci:, oci-archive:,
docker-archive:) in a VMI or a VM's template, since a cluster pulls images
from a registry. A cluster's own configuration (kemu-config hostDiskDirs,
whether CDI is installed) is not known here and not checked.`,
		Example: `  kemuctl validate examples/standalone/*.yaml
  kemuctl validate --for cluster examples/cluster/*.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if forWhere != ForRun && forWhere != ForCluster {
				return fmt.Errorf("--for %q: must be %s or %s", forWhere, ForRun, ForCluster)
			}
			bad := false
			for _, name := range args {
				docs, err := Read(name, cmd.InOrStdin())
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", name, err)
					bad = true
				}
				for _, d := range docs {
					if forWhere == ForCluster && d.Object != nil {
						d.Errors = append(d.Errors, validation.ValidateForCluster(d.Object)...)
					}
					where := fmt.Sprintf("%s#%d %s", name, d.Index, d.Describe())
					if len(d.Errors) == 0 {
						fmt.Fprintf(cmd.OutOrStdout(), "%s: valid\n", where)
						continue
					}
					bad = true
					for _, e := range d.Errors {
						fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", where, e.Error())
					}
				}
				if err == nil && len(docs) == 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: no documents\n", name)
					bad = true
				}
			}
			if bad {
				return cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&forWhere, "for", ForRun, "where the objects run: run (kemuctl run) or cluster (also refuses local oci: image references)")
	_ = cmd.RegisterFlagCompletionFunc("for", cobra.FixedCompletions([]string{ForRun, ForCluster}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
