package subresource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// NodeAgents reaches the node agent of a VMI's node (kube/nodeapi).
type NodeAgents interface {
	// Stream opens the byte stream verb (console, vnc) of vmi.
	Stream(ctx context.Context, vmi *v1.VirtualMachineInstance, verb string) (io.ReadWriteCloser, error)
	// Get decodes verb's JSON reply about vmi into out.
	Get(ctx context.Context, vmi *v1.VirtualMachineInstance, verb string, out any) error
}

// Stream limits.
const (
	// chunk is the most one message to the user carries.
	chunk = 32 << 10
	// closeWait bounds writing a close frame.
	closeWait = 5 * time.Second
)

var upgrader = websocket.Upgrader{
	Subprotocols:    []string{subresources.StreamProtocol},
	ReadBufferSize:  4 << 10,
	WriteBufferSize: chunk,
	// Requests come through kube-apiserver's proxy, authenticated and
	// authorized there; a browser's Origin means nothing here.
	CheckOrigin: func(*http.Request) bool { return true },
}

// runningVMI reads the VMI and refuses one whose guest is not there to
// talk to.
func (h *Handler) runningVMI(ctx context.Context, ns, name string) (*v1.VirtualMachineInstance, error) {
	vmi, err := h.Kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, apiError(ctx, "reading the VMI", err)
	}
	if err := checkRunning(vmi); err != nil {
		return nil, apierrors.NewConflict(vmiResource, name, err)
	}
	if vmi.Status.NodeName == "" {
		return nil, apierrors.NewConflict(vmiResource, name, fmt.Errorf("%s has no node", ref(vmi)))
	}
	return vmi, nil
}

// stream splices a WebSocket from the user to the node agent's stream.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, verb subresources.Verb, ns, name string) {
	ctx := r.Context()
	if !websocket.IsWebSocketUpgrade(r) {
		writeError(w, apierrors.NewBadRequest(verb.Name+" is a WebSocket stream (subprotocol "+subresources.StreamProtocol+")"))
		return
	}
	if !hasProtocol(r, subresources.StreamProtocol) {
		writeError(w, apierrors.NewBadRequest("WebSocket subprotocol "+subresources.StreamProtocol+" is required"))
		return
	}
	vmi, err := h.runningVMI(ctx, ns, name)
	if err != nil {
		writeError(w, err)
		return
	}
	// The node side first: a failure there is still an HTTP answer.
	node, err := h.Nodes.Stream(context.WithoutCancel(ctx), vmi, verb.Name)
	if err != nil {
		writeError(w, apiError(ctx, "opening the "+verb.Name+" on node "+vmi.Status.NodeName, err))
		return
	}
	defer node.Close()
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		// Upgrade wrote the HTTP error.
		klog.FromContext(ctx).V(2).Info("WebSocket upgrade failed", "err", err)
		return
	}
	defer ws.Close()
	ws.SetReadLimit(subresources.MaxStreamMessage)
	logger := klog.FromContext(ctx)
	logger.Info("Stream opened", "node", vmi.Status.NodeName)
	reason := splice(ws, node, h.Stopping, verb.Name)
	logger.Info("Stream closed", "reason", reason)
}

func hasProtocol(r *http.Request, p string) bool {
	for _, got := range websocket.Subprotocols(r) {
		if got == p {
			return true
		}
	}
	return false
}

// splice copies both ways until one side ends or stopping closes, then
// tells the user why in the close frame and returns it.
func splice(ws *websocket.Conn, node io.ReadWriteCloser, stopping <-chan struct{}, what string) string {
	done := make(chan string, 2)
	var once sync.Once
	finish := func(reason string) { once.Do(func() { done <- reason }) }
	go func() { // user -> node
		for {
			typ, data, err := ws.ReadMessage()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					finish("the client closed the " + what)
				} else {
					finish("the client connection broke: " + err.Error())
				}
				return
			}
			if typ != websocket.BinaryMessage && typ != websocket.TextMessage {
				continue
			}
			if _, err := node.Write(data); err != nil {
				finish("the " + what + " on the node ended: " + err.Error())
				return
			}
		}
	}()
	go func() { // node -> user
		buf := make([]byte, chunk)
		for {
			n, err := node.Read(buf)
			if n > 0 {
				if werr := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
					finish("the client connection broke: " + werr.Error())
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					finish("the " + what + " ended on the node (the VMI stopped, or its node agent went away)")
				} else {
					finish("the " + what + " on the node broke: " + err.Error())
				}
				return
			}
		}
	}()
	var reason string
	code := websocket.CloseNormalClosure
	select {
	case reason = <-done:
	case <-stopping:
		reason, code = "kemu-api is shutting down; connect again", websocket.CloseGoingAway
	}
	msg := websocket.FormatCloseMessage(code, truncate(reason, 123))
	_ = ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(closeWait))
	node.Close()
	ws.Close()
	return reason
}

// truncate cuts s to at most n bytes (a close frame's reason is ≤ 123).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
