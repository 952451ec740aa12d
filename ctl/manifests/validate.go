package manifests

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/ctl/cli"
)

// NewValidateCommand is kemuctl validate.
func NewValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check kemu or KubeVirt manifests (YAML or JSON) and print every error with its field path",
		Long: `validate reads each FILE ("-" for standard input), which may hold several
YAML documents, JSON, or a List, of kemu.dev/v1alpha1 or kubevirt.io/v1 (or v1alpha3)
VirtualMachineInstance, VirtualMachine and VirtualMachineInstanceMigration
objects and instancetype.kemu.dev/v1beta1 or instancetype.kubevirt.io/v1beta1
instance types and preferences. It applies kemu's defaults and prints every problem with its field
path. The exit status is 1 if any document has an error.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := false
			for _, name := range args {
				docs, err := Read(name, cmd.InOrStdin())
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", name, err)
					bad = true
				}
				for _, d := range docs {
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
}
