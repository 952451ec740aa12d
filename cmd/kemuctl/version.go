package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// serverVersionTimeout bounds asking kemu-api its version.
const serverVersionTimeout = 10 * time.Second

func newVersionCommand(c *cli.Cluster) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version [--client]",
		Short: "Print kemuctl's version and API version, and kemu-api's",
		Long: `version prints kemuctl's version and the kemu API version it speaks, then the
version of kemu-api, the cluster's aggregated API (subresources.kemu.dev),
asked through the cluster of the connection flags. As kubectl version: when
the server version is unavailable (no cluster configured, kemu-api not
installed or not answering), a line says why and the exit status is 1;
--client prints only kemuctl's version and does not contact the cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if _, err := fmt.Fprintln(out, clientVersionLine()); err != nil || clientOnly {
				return err
			}
			sv, err := serverVersion(cmd.Context(), c)
			fmt.Fprintln(out, serverVersionLine(sv, err))
			if err != nil {
				return cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print only kemuctl's version (no cluster needed)")
	return cmd
}

// clientVersionLine is kemuctl's own version.
func clientVersionLine() string {
	return fmt.Sprintf("kemuctl %s (API %s)", version, v1alpha1.APIVersion)
}

// serverVersion asks kemu-api for its version through the cluster.
func serverVersion(ctx context.Context, c *cli.Cluster) (*subresources.ServerVersion, error) {
	cfg, err := c.Config()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, serverVersionTimeout)
	defer cancel()
	raw, err := kube.Discovery().RESTClient().Get().AbsPath(subresources.VersionPath()).DoRaw(ctx)
	if err != nil {
		return nil, serverError{host: cfg.Host, err: err}
	}
	var sv subresources.ServerVersion
	if err := json.Unmarshal(raw, &sv); err != nil {
		return nil, serverError{host: cfg.Host, err: fmt.Errorf("decoding the reply: %w", err)}
	}
	return &sv, nil
}

// serverError is a failed request to the cluster at host.
type serverError struct {
	host string
	err  error
}

func (e serverError) Error() string { return e.err.Error() }
func (e serverError) Unwrap() error { return e.err }

// serverVersionLine is kemu-api's version, else why it is unavailable.
func serverVersionLine(sv *subresources.ServerVersion, err error) string {
	if err == nil {
		return fmt.Sprintf("kemu-api %s (%s, %s)", sv.GitVersion, sv.GoVersion, sv.Platform)
	}
	return "kemu-api version unavailable: " + unavailableReason(err)
}

// unavailableReason says why kemu-api's version could not be had.
func unavailableReason(err error) string {
	var se serverError
	isServer := errors.As(err, &se)
	switch {
	case errors.Is(err, cli.ErrNoCluster):
		return cli.ErrNoCluster.Error()
	case isServer && apierrors.IsNotFound(err):
		return fmt.Sprintf("kemu-api is not installed in the cluster at %s (no API %s)", se.host, subresources.GroupVersion)
	case isServer && apierrors.IsServiceUnavailable(err):
		return fmt.Sprintf("kemu-api is not answering in the cluster at %s (API %s is registered, its service is unavailable): %v",
			se.host, subresources.GroupVersion, se.err)
	}
	return err.Error()
}
