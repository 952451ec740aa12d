package verbs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/ctl/apiclient"
	"github.com/kemu-dev/kemu/ctl/cli"
)

// NewVNCCommand is kemuctl vnc: a local port for a VNC viewer. Commands
// that speak RFB themselves (a screenshot) are its subcommands and open
// the display with vncTarget.open.
func NewVNCCommand(c *cli.Cluster) *cobra.Command {
	var port int
	address := "127.0.0.1"
	cmd := &cobra.Command{
		Use:     "vnc VMI [--port N] [--address ADDR]",
		Short:   "Serve a VirtualMachineInstance's VNC display on a local port",
		Example: "  kemuctl vnc myvmi -n myns --port 5901   # then: vncviewer 127.0.0.1:5901",
		Long: `vnc listens on a local TCP port (--address, default 127.0.0.1; --port,
default a free one) and prints where; each connection a VNC viewer makes gets
its own stream of kemu-api's vnc subresource of the VMI (the user needs get on
` + subresources.VNC.Subresource() + ` in ` + subresources.Group + `; no exec into any Pod),
which kemu-api splices to the node agent of the VMI's node and on to QEMU's
VNC server, both ways. A stream kemu-api ends is reported with its reason; the
listener stays. Ctrl-C (or SIGTERM) ends kemuctl vnc and its connections.

Anyone who can connect to the port sees and drives the guest's display as
you: keep the address on loopback unless you mean to share it.

` + cli.ConnectionHelp + `
The exit status is 0 after Ctrl-C; 1 when the VMI is not found, the port cannot
be opened or the cluster not reached; 2 for a usage error.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.CompleteVMIs,
		RunE: func(cmd *cobra.Command, args []string) error {
			errOut := cmd.ErrOrStderr()
			if port < 0 || port > 65535 {
				fmt.Fprintf(errOut, "kemuctl vnc: --port %d: want 0 (a free port) to 65535\n", port)
				return cli.ExitError{Code: 2}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			t, err := newVNCTarget(ctx, c, args[0])
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl vnc: %v\n", err)
				return cli.ExitError{Code: 1}
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(port)))
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl vnc: %v\n", err)
				return cli.ExitError{Code: 1}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "VNC of %s on %s; Ctrl-C ends\n", t.ref, ln.Addr())
			t.serve(ctx, ln, errOut)
			return nil
		},
	}
	cmd.AddCommand(newVNCScreenshotCommand(c))
	cmd.Flags().IntVar(&port, "port", 0, "the local port (0: a free one)")
	cmd.Flags().StringVar(&address, "address", address, "the local address to listen on")
	return cmd
}

// vncTarget is a VMI's VNC display through kemu-api.
type vncTarget struct {
	api      *apiclient.Client
	ns, name string
	ref      string
}

// newVNCTarget checks that the VMI exists (its display is checked per
// connection: the VMI may start or move meanwhile).
func newVNCTarget(ctx context.Context, c *cli.Cluster, name string) (*vncTarget, error) {
	cl, err := c.Clients()
	if err != nil {
		return nil, err
	}
	api, err := apiclient.New(cl.Config)
	if err != nil {
		return nil, err
	}
	t := &vncTarget{api: api, ns: cl.Namespace, name: name, ref: fmt.Sprintf("VMI %s/%s", cl.Namespace, name)}
	getCtx, cancel := context.WithTimeout(ctx, vmOpTimeout)
	defer cancel()
	if _, err := cl.Kemu.KemuV1alpha1().VirtualMachineInstances(t.ns).Get(getCtx, name, metav1.GetOptions{}); err != nil {
		return nil, requestError("VMI", subresources.VMIs, t.ns, name, err)
	}
	return t, nil
}

// open opens one stream of the VMI's display (RFB both ways).
func (t *vncTarget) open(ctx context.Context) (*apiclient.Conn, error) {
	openCtx, cancel := context.WithTimeout(ctx, vmOpTimeout)
	defer cancel()
	conn, err := t.api.Stream(openCtx, subresources.VNC, t.ns, t.name)
	if err != nil {
		return nil, requestError("VMI", subresources.VMIs, t.ns, t.name, err)
	}
	return conn, nil
}

// serve gives each connection accepted on ln its own stream until ctx
// ends; then it closes ln and every connection and returns.
func (t *vncTarget) serve(ctx context.Context, ln net.Listener, errOut io.Writer) {
	var wg sync.WaitGroup
	var mu sync.Mutex // errOut
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(errOut, "kemuctl vnc: "+format+"\n", args...)
	}
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				report("accepting: %v", err)
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			conn, err := t.open(ctx)
			if err != nil {
				report("%s: %v", c.RemoteAddr(), err)
				return
			}
			if err := splice(ctx, c, conn); err != nil {
				report("%s: %v", c.RemoteAddr(), err)
			}
		}()
	}
	wg.Wait()
}

// splice copies between the local connection and the stream until either
// ends or ctx does; it returns why the stream ended when kemu-api ended it
// or it broke (nil when the local side or ctx ended it).
func splice(ctx context.Context, local net.Conn, conn *apiclient.Conn) error {
	streamDone := make(chan error, 1)
	localDone := make(chan struct{})
	go func() { // stream -> local
		_, err := io.Copy(local, conn)
		streamDone <- err
	}()
	go func() { // local -> stream
		_, _ = io.Copy(conn, local)
		close(localDone)
	}()
	var err error
	select {
	case err = <-streamDone:
		var closed *apiclient.ClosedError
		if errors.As(err, &closed) && closed.Code == 1000 && closed.Reason == "" {
			err = nil
		}
	case <-localDone:
	case <-ctx.Done():
	}
	conn.Close()
	local.Close()
	return err
}
