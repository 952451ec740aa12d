package manifests

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/api/manifest"
)

// NewExplainCommand is kemuctl explain.
func NewExplainCommand() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "explain KIND[.FIELD...]",
		Short: "List the KubeVirt fields of a kind or field and whether kemu supports each",
		Long: `explain lists the fields of vmi, vm or vmim, or of one of their fields
(vmi.spec.domain.devices, vm.spec.template.spec.volumes), as KubeVirt's
kubevirt.io/v1 schema and kemu's kemu.dev/v1alpha1 have them, each marked
"supported" (kemu reads it with KubeVirt's meaning; a value may still be
refused), "not supported" (refused by name) or "kemu only". --recursive
goes down every supported level. Needs no cluster.`,
		Example: `  kemuctl explain vmi.spec.domain.devices.disks
  kemuctl explain vm.spec --recursive`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fields, err := manifest.Explain(args[0], recursive)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "FIELD\tKEMU\n")
			for _, f := range fields {
				path := f.Path
				if f.Nested {
					path += " <object>"
				}
				fmt.Fprintf(w, "%s\t%s\n", path, f.Support)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "(KubeVirt's fields as of %s)\n", manifest.SchemaSource())
			return nil
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "list the fields of every supported level below too")
	return cmd
}
