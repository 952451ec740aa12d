package verbs

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/rfb"
)

// screenshotTimeout bounds kemuctl vnc screenshot.
const screenshotTimeout = time.Minute

// newVNCScreenshotCommand is kemuctl vnc screenshot.
func newVNCScreenshotCommand(c *cli.Cluster) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:     "screenshot VMI -o FILE",
		Short:   "Save a VirtualMachineInstance's screen as a PNG",
		Example: "  kemuctl vnc screenshot myvmi -n myns -o shot.png",
		Long: `screenshot opens one stream of kemu-api's vnc subresource of the VMI (get on
` + subresources.VNC.Subresource() + ` in ` + subresources.Group + `), speaks RFB over it
(kemuctl's own client, ctl/rfb: no VNC viewer needed) and writes the whole
screen as a PNG to FILE.

` + cli.ConnectionHelp + `
The exit status is 0 when the file is written; 1 when the VMI, its display or
the cluster cannot be reached; 2 for a usage error.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.CompleteVMIs,
		RunE: func(cmd *cobra.Command, args []string) error {
			errOut := cmd.ErrOrStderr()
			if out == "" {
				fmt.Fprintln(errOut, "kemuctl vnc screenshot: -o FILE is required")
				return cli.ExitError{Code: 2}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), screenshotTimeout)
			defer cancel()
			t, err := newVNCTarget(ctx, c, args[0])
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl vnc screenshot: %v\n", err)
				return cli.ExitError{Code: 1}
			}
			conn, err := t.open(ctx)
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl vnc screenshot: %v\n", err)
				return cli.ExitError{Code: 1}
			}
			defer conn.Close()
			img, err := rfb.Screenshot(ctx, conn)
			if err == nil {
				err = rfb.SavePNG(out, img)
			}
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl vnc screenshot: %s: %v\n", t.ref, err)
				return cli.ExitError{Code: 1}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %dx%d screen of %s\n", out, img.Bounds().Dx(), img.Bounds().Dy(), t.ref)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the PNG file to write")
	return cmd
}
