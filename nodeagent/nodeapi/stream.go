package nodeapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/nodeapi"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/vmi"
)

// closeGrace is how long the end of a stream waits for the client to take
// what is left.
const closeGrace = 5 * time.Second

// chunk is the most one read of the client's bytes carries into one
// gRPC message.
const chunk = 32 << 10

// Why a stream ended (logged; the client sees its connection closed).
var (
	errLauncherGone = errors.New("the VMI's launcher went away")
	errReplaced     = errors.New("a newer connection took the VMI's stream")
	errServerClosed = errors.New("the node agent's API is closing")
)

// launcherStream is a launcher's Console or Vnc stream as raw bytes.
type launcherStream struct {
	send      func([]byte) error
	recv      func() ([]byte, error)
	closeSend func() error
}

// open opens verb's stream on the launcher with ctx.
func open(ctx context.Context, c rpc.LauncherClient, verb string) (*launcherStream, error) {
	if verb == nodeapi.Console {
		st, err := c.Console(ctx)
		if err != nil {
			return nil, err
		}
		return &launcherStream{
			send:      func(b []byte) error { return st.Send(&rpc.ConsoleInput{Data: b}) },
			recv:      func() ([]byte, error) { m, err := st.Recv(); return m.GetData(), err },
			closeSend: st.CloseSend,
		}, nil
	}
	st, err := c.Vnc(ctx)
	if err != nil {
		return nil, err
	}
	return &launcherStream{
		send:      func(b []byte) error { return st.Send(&rpc.StreamData{Data: b}) },
		recv:      func() ([]byte, error) { m, err := st.Recv(); return m.GetData(), err },
		closeSend: st.CloseSend,
	}, nil
}

// serveStream upgrades the request to nodeapi.StreamUpgrade and splices
// the connection with the launcher's stream. One stream of each verb per
// VMI: a newer connection ends the older one (as KubeVirt's serial
// console does), so a forgotten session never locks the console.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, verb string, l vmi.APILauncher) {
	if !headerHasToken(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), nodeapi.StreamUpgrade) {
		w.Header().Set("Upgrade", nodeapi.StreamUpgrade)
		w.Header().Set("Connection", "Upgrade")
		writeError(w, http.StatusUpgradeRequired, metav1.StatusReasonBadRequest, verb+" is a stream: Upgrade to "+nodeapi.StreamUpgrade)
		return
	}
	logger := klog.FromContext(r.Context())
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	stopLauncher := context.AfterFunc(l.Ctx, func() { cancel(errLauncherGone) })
	defer stopLauncher()
	stopServer := context.AfterFunc(s.ctx, func() { cancel(errServerClosed) })
	defer stopServer()
	release, ok := s.streams.acquire(slotKey{uid: l.VMIUID, verb: verb}, func() { cancel(errReplaced) })
	if !ok {
		writeError(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "the node agent's API is closing")
		return
	}
	defer release()
	ls, err := open(ctx, l.Client, verb)
	if err != nil {
		writeRPCError(w, verb, err)
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		cancel(err)
		writeError(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "upgrade: "+err.Error())
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(noDeadline)
	if _, err := fmt.Fprintf(buf, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", nodeapi.StreamUpgrade); err != nil {
		return
	}
	if err := buf.Flush(); err != nil {
		return
	}
	logger.V(2).Info("Stream opened")
	reason := splice(ctx, cancel, conn, buf.Reader, ls)
	logger.Info("Stream ended", "reason", reason)
}

// splice copies the client's bytes into the launcher's stream and the
// launcher's into the connection until one side ends. The client's
// half-close (EOF) closes the launcher stream's sending side and the
// output goes on; the launcher's end (or ctx's: the launcher gone, a
// newer connection, the server closing) closes the connection after what
// was received is written (TLS close_notify). Both goroutines have ended
// when it returns the reason.
func splice(ctx context.Context, cancel context.CancelCauseFunc, conn net.Conn, in *bufio.Reader, ls *launcherStream) error {
	// Once ctx ends, a write to a client that does not read gives up
	// after closeGrace.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetWriteDeadline(time.Now().Add(closeGrace)) })
	defer stop()
	upDone := make(chan error, 1)
	go func() {
		b := make([]byte, chunk)
		for {
			n, err := in.Read(b)
			if n > 0 {
				if serr := ls.send(append([]byte(nil), b[:n]...)); serr != nil {
					upDone <- fmt.Errorf("to the launcher: %w", serr)
					return
				}
			}
			if errors.Is(err, io.EOF) {
				upDone <- ls.closeSend()
				return
			}
			if err != nil {
				upDone <- fmt.Errorf("from the client: %w", err)
				return
			}
		}
	}()
	downDone := make(chan error, 1)
	go func() {
		for {
			b, err := ls.recv()
			if err != nil {
				downDone <- err
				return
			}
			if _, err := conn.Write(b); err != nil {
				downDone <- fmt.Errorf("to the client: %w", err)
				return
			}
		}
	}()
	var reason error
	upRunning := true
	select {
	case err := <-upDone:
		upRunning = false
		if err == nil {
			// Half-closed by the client: the launcher's output goes on.
			reason = <-downDone
			break
		}
		reason = err
		cancel(err)
		_ = conn.Close()
		<-downDone
	case reason = <-downDone:
	}
	if cause := context.Cause(ctx); cause != nil {
		reason = cause
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	cancel(reason)
	_ = conn.Close()
	if upRunning {
		<-upDone
	}
	return reason
}

// headerHasToken says whether a comma-separated header lists token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// slotKey is one stream of one VMI.
type slotKey struct {
	uid  types.UID
	verb string
}
