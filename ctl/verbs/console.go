package verbs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/ctl/apiclient"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/shell"
)

// NewConsoleCommand is kemuctl console.
func NewConsoleCommand(c *cli.Cluster) *cobra.Command {
	return &cobra.Command{
		Use:     "console VMI",
		Short:   "Attach to a VirtualMachineInstance's serial console",
		Example: "  kemuctl console myvmi -n myns",
		Long: `console attaches the terminal to the guest's serial console through kemu-api's
console subresource (the user needs get on ` + subresources.Console.Subresource() + ` in
` + subresources.Group + `; no exec into any Pod): a WebSocket to kemu-api, which
splices it to the node agent of the VMI's node and on to the VMI's launcher.
On a terminal, stdin is put in raw mode and Ctrl-] leaves; the terminal's size
is not carried to the guest (set it there, e.g. stty rows R cols C). From a
pipe, the console is left once the input ended and the guest's output is quiet.
When kemu-api ends the stream (the VMI stopped, kemu-api is shutting down…)
kemuctl says why.

` + cli.ConnectionHelp + `
The exit status is 0 when the user left or the console ended normally; 1 when
the console cannot be reached (the VMI not found, not running), or the stream
broke or was ended for another reason; 2 for a usage error.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.CompleteVMIs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConsole(cmd, c, args[0])
		},
	}
}

func runConsole(cmd *cobra.Command, c *cli.Cluster, name string) error {
	errOut := cmd.ErrOrStderr()
	fail := func(err error) error {
		fmt.Fprintf(errOut, "kemuctl console: %v\n", err)
		return cli.ExitError{Code: 1}
	}
	cl, err := c.Clients()
	var api *apiclient.Client
	if err == nil {
		api, err = apiclient.New(cl.Config)
	}
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	openCtx, openCancel := context.WithTimeout(ctx, vmOpTimeout)
	conn, err := api.Stream(openCtx, subresources.Console, cl.Namespace, name)
	openCancel()
	if err != nil {
		return fail(requestError("VMI", subresources.VMIs, cl.Namespace, name, err))
	}
	ref := fmt.Sprintf("VMI %s/%s", cl.Namespace, name)
	if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd := int(f.Fd())
		if old, err := term.MakeRaw(fd); err == nil {
			defer func() { _ = term.Restore(fd, old) }()
		}
		fmt.Fprintf(errOut, "connected to the serial console of %s; Ctrl-] leaves\r\n", ref)
		defer fmt.Fprint(errOut, "\r\nleft the serial console\r\n")
	}
	err = attach(ctx, conn, cmd.InOrStdin(), cmd.OutOrStdout())
	var closed *apiclient.ClosedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &closed) && closed.Code == 1000:
		fmt.Fprintf(errOut, "\r\nkemuctl console: %v\r\n", err)
		return nil
	}
	fmt.Fprintf(errOut, "\r\nkemuctl console: %v\r\n", err)
	return cli.ExitError{Code: 1}
}

// attach copies in to the console and the console to out until the user
// leaves (Ctrl-]; the end of in, then once the output is quiet for
// shell.ConsoleDrain; ctx) — nil — or the stream ends — its error (a
// *apiclient.ClosedError when kemu-api closed it).
func attach(ctx context.Context, conn *apiclient.Conn, in io.Reader, out io.Writer) error {
	var lastOutput atomic.Int64
	lastOutput.Store(time.Now().UnixNano())
	outDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				lastOutput.Store(time.Now().UnixNano())
				if _, werr := out.Write(buf[:n]); werr != nil {
					outDone <- werr
					return
				}
			}
			if err != nil {
				outDone <- err
				return
			}
		}
	}()
	input := &escapeReader{r: in, escaped: make(chan struct{})}
	inDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, input)
		inDone <- err
	}()

	var result error
	select {
	case result = <-outDone:
	case <-ctx.Done():
	case err := <-inDone:
		if err != nil || input.wasEscaped() {
			result = err
			break
		}
		// The input ended: print what the guest still says until it is quiet.
		result = drain(ctx, outDone, &lastOutput)
	}
	conn.Close() // ends the reader; a pending read of in stays (the process ends)
	return result
}

// drain waits until the output was quiet for shell.ConsoleDrain (nil) or
// the stream ends (its error).
func drain(ctx context.Context, outDone <-chan error, lastOutput *atomic.Int64) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-outDone:
			return err
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if time.Since(time.Unix(0, lastOutput.Load())) > shell.ConsoleDrain {
				return nil
			}
		}
	}
}

// escapeReader passes r through up to the first Ctrl-] (which the guest
// does not get), then ends.
type escapeReader struct {
	r       io.Reader
	once    sync.Once
	escaped chan struct{}
}

func (e *escapeReader) Read(p []byte) (int, error) {
	if e.wasEscaped() {
		return 0, io.EOF
	}
	n, err := e.r.Read(p)
	for i := range n {
		if p[i] == shell.ConsoleEscape {
			e.once.Do(func() { close(e.escaped) })
			if i == 0 {
				return 0, io.EOF
			}
			return i, nil
		}
	}
	return n, err
}

func (e *escapeReader) wasEscaped() bool {
	select {
	case <-e.escaped:
		return true
	default:
		return false
	}
}
