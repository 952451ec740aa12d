package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/api/v1alpha1"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kemuctl's version and API version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "kemuctl %s (API %s)\n", version, v1alpha1.APIVersion)
			return err
		},
	}
}
