package manifests

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/manifest"
	"github.com/kemu-dev/kemu/ctl/cli"
)

// NewConvertCommand is kemuctl convert.
func NewConvertCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "convert FILE...",
		Short: "Turn KubeVirt manifests into kemu manifests, reporting what cannot be carried over",
		Long: `convert reads each FILE ("-" for standard input) of kubevirt.io/v1 or v1alpha3 and
instancetype.kubevirt.io/v1beta1 (or kemu.dev/v1alpha1, instancetype.kemu.dev/v1beta1)
objects and writes kemu.dev/v1alpha1 and instancetype.kemu.dev/v1beta1 manifests to standard
output, as a multi-document YAML stream (or JSON with -o json). Fields kemu
does not support are left out and listed on standard error, as are the errors
that remain in the converted manifest. The exit status is 1 if anything was
left out or an error remains.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "yaml" && output != "json" {
				return fmt.Errorf("--output: %q is not yaml or json", output)
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			bad := false
			first := true
			for _, name := range args {
				docs, err := Read(name, cmd.InOrStdin())
				if err != nil {
					fmt.Fprintf(stderr, "%s: %v\n", name, err)
					bad = true
				}
				for _, d := range docs {
					where := fmt.Sprintf("%s#%d %s", name, d.Index, d.Describe())
					c, err := manifest.Convert(d)
					if err != nil {
						fmt.Fprintf(stderr, "%s: %v\n", where, err)
						bad = true
						continue
					}
					for _, p := range c.Dropped {
						fmt.Fprintf(stderr, "%s: %s: not carried over: kemu does not support it\n", where, p)
						bad = true
					}
					for _, e := range c.Errors {
						fmt.Fprintf(stderr, "%s: %s\n", where, e.Error())
						bad = true
					}
					var out []byte
					if output == "json" {
						out, err = json.MarshalIndent(c.Object, "", "  ")
						out = append(out, '\n')
					} else {
						out, err = yaml.Marshal(c.Object)
						if !first {
							out = append([]byte("---\n"), out...)
						}
					}
					if err != nil {
						return fmt.Errorf("%s: writing: %w", where, err)
					}
					first = false
					if _, err := stdout.Write(out); err != nil {
						return err
					}
				}
			}
			if bad {
				return cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "output format: yaml or json")
	return cmd
}
