// Package apiclient is kemuctl's client of kemu-api's aggregated API
// (api/subresources): the PUT verbs with their options, the GET reports,
// the version endpoint, and the console and VNC WebSocket streams, all
// through kube-apiserver with the user's own credentials.
package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport/websocket"

	"github.com/kemu-dev/kemu/api/subresources"
)

// Client calls subresources.kemu.dev.
type Client struct {
	cfg  *rest.Config
	rest rest.Interface
}

// New returns a client for the cluster of cfg.
func New(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{Group: subresources.Group, Version: subresources.Version}
	c.APIPath = "/apis"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kemu-api client: %w", err)
	}
	return &Client{cfg: rest.CopyConfig(cfg), rest: rc}, nil
}

// Put calls a PUT verb on namespace/name with opts as its body (nil: none).
func (c *Client) Put(ctx context.Context, verb subresources.Verb, namespace, name string, opts any) ([]byte, error) {
	req := c.rest.Put().AbsPath(verb.Path(namespace, name))
	if opts != nil {
		body, err := json.Marshal(opts)
		if err != nil {
			return nil, err
		}
		req = req.Body(body).SetHeader("Content-Type", "application/json")
	}
	// Raw() keeps the unstructured error; Error() decodes the Status.
	res := req.Do(ctx)
	raw, _ := res.Raw()
	return raw, res.Error()
}

// Get calls a GET verb on namespace/name and decodes its reply into out.
func (c *Client) Get(ctx context.Context, verb subresources.Verb, namespace, name string, out any) error {
	res := c.rest.Get().AbsPath(verb.Path(namespace, name)).Do(ctx)
	if err := res.Error(); err != nil {
		return err
	}
	raw, _ := res.Raw()
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s reply: %w", verb.Name, err)
	}
	return nil
}

// Version is kemu-api's version.
func (c *Client) Version(ctx context.Context) (*subresources.ServerVersion, error) {
	res := c.rest.Get().AbsPath(subresources.VersionPath()).Do(ctx)
	if err := res.Error(); err != nil {
		return nil, err
	}
	raw, _ := res.Raw()
	var v subresources.ServerVersion
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("version reply: %w", err)
	}
	return &v, nil
}

// Stream opens a stream verb (console, vnc) of the VMI namespace/name.
func (c *Client) Stream(ctx context.Context, verb subresources.Verb, namespace, name string) (*Conn, error) {
	rt, holder, err := websocket.RoundTripperFor(c.cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb.Name, err)
	}
	u, err := url.Parse(c.cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("%s: server %q: %w", verb.Name, c.cfg.Host, err)
	}
	// client-go's RoundTripper turns http(s) into ws(s) itself.
	u = u.JoinPath(verb.Path(namespace, name))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	ws, err := websocket.Negotiate(rt, holder, req, subresources.StreamProtocol)
	if err != nil {
		return nil, fmt.Errorf("opening the %s of VMI %s/%s: %w", verb.Name, namespace, name, err)
	}
	return newConn(ws), nil
}
