// Package nodeclient is kemu-api's client of the node agents' API
// (kube/nodeapi): it finds the node agent Pod of a VMI's node, connects
// with kemu-api's client certificate, checks that the server's
// certificate is that node's, and opens streams or fetches replies.
package nodeclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/nodeapi"
)

// Limits.
const (
	// maxReply bounds a JSON reply (guest reports are bounded by the
	// launcher; this is a second net).
	maxReply = 4 << 20
	// maxErrorBody bounds the text of an error reply.
	maxErrorBody = 4 << 10
	// DialTimeout bounds connecting and the TLS handshake.
	DialTimeout = 10 * time.Second
	// GetTimeout bounds a non-stream request.
	GetTimeout = 30 * time.Second
)

// Credentials gives the TLS client configuration for a node: kemu-api's
// client certificate and the CA bundle of the node certificates, with
// ServerName set to the node's name.
type Credentials interface {
	ClientTLS(nodeName string) (*tls.Config, error)
}

// Client reaches node agents.
type Client struct {
	// Pods lists the node agent Pods (kemu's namespace, label
	// nodeapi.AgentLabel).
	Pods  corelisters.PodNamespaceLister
	Creds Credentials
}

// addr is the node agent API's address on node: its Pod's IP and the port
// named nodeapi.PortName.
func (c *Client) addr(node string) (string, error) {
	sel, err := labels.Parse(nodeapi.AgentLabel)
	if err != nil {
		return "", err
	}
	pods, err := c.Pods.List(sel)
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		if p.Spec.NodeName != node || p.Status.PodIP == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		port := nodeapi.DefaultPort
		for _, ctr := range p.Spec.Containers {
			for _, cp := range ctr.Ports {
				if cp.Name == nodeapi.PortName {
					port = int(cp.ContainerPort)
				}
			}
		}
		return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)), nil
	}
	return "", apierrors.NewServiceUnavailable(fmt.Sprintf("no kemu node agent runs on node %s", node))
}

// request sends one request for verb about vmi to its node agent.
func (c *Client) request(ctx context.Context, vmi *v1.VirtualMachineInstance, verb string, upgrade bool) (*http.Response, error) {
	node := vmi.Status.NodeName
	addr, err := c.addr(node)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := c.Creds.ClientTLS(node)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("kemu-api's node client certificate: %v", err))
	}
	tr := &http.Transport{
		Proxy:               nil,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: DialTimeout,
		DialContext:         (&net.Dialer{Timeout: DialTimeout}).DialContext,
		DisableKeepAlives:   true,
		ForceAttemptHTTP2:   false,
	}
	method := http.MethodGet
	req, err := http.NewRequestWithContext(ctx, method, "https://"+addr+nodeapi.Path(vmi.Namespace, vmi.Name, verb), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(nodeapi.UIDHeader, string(vmi.UID))
	if upgrade {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", nodeapi.StreamUpgrade)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("node agent on %s: %v", node, err))
	}
	return resp, nil
}

// Stream opens verb's byte stream.
func (c *Client) Stream(ctx context.Context, vmi *v1.VirtualMachineInstance, verb string) (io.ReadWriteCloser, error) {
	resp, err := c.request(ctx, vmi, verb, true)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, replyError(resp, vmi)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("node agent on %s: the upgraded connection is not writable", vmi.Status.NodeName)
	}
	return rwc, nil
}

// Get decodes verb's JSON reply into out.
func (c *Client) Get(ctx context.Context, vmi *v1.VirtualMachineInstance, verb string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, GetTimeout)
	defer cancel()
	resp, err := c.request(ctx, vmi, verb, false)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return replyError(resp, vmi)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxReply)).Decode(out); err != nil {
		return fmt.Errorf("node agent on %s: %s reply: %w", vmi.Status.NodeName, verb, err)
	}
	return nil
}

// replyError turns a node agent's error reply into an API error with the
// same meaning.
func replyError(resp *http.Response, vmi *v1.VirtualMachineInstance) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	text := strings.TrimSpace(string(body))
	// The node agent answers errors with a metav1.Status.
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		text = st.Message
	}
	msg := fmt.Sprintf("node agent on %s: %s", vmi.Status.NodeName, text)
	gr := schema.GroupResource{Group: v1.GroupName, Resource: "virtualmachineinstances"}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return apierrors.NewNotFound(gr, vmi.Name)
	case http.StatusConflict:
		return apierrors.NewConflict(gr, vmi.Name, fmt.Errorf("%s", msg))
	case http.StatusServiceUnavailable:
		return apierrors.NewServiceUnavailable(msg)
	case http.StatusGatewayTimeout:
		return apierrors.NewTimeoutError(msg, 1)
	case http.StatusBadRequest, http.StatusUpgradeRequired:
		return apierrors.NewBadRequest(msg)
	case http.StatusTooManyRequests:
		return apierrors.NewTooManyRequests(msg, 1)
	default:
		return apierrors.NewInternalError(fmt.Errorf("%s (HTTP %d)", msg, resp.StatusCode))
	}
}
