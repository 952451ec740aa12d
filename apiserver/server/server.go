package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"

	"github.com/kemu-dev/kemu/api/subresources"
)

// DefaultPort is kemu-api's HTTPS port in its Pod (the Service maps 443 to it).
const DefaultPort = 8443

// Options are the generic server's flags (serving, delegated
// authentication and authorization, audit).
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
	Audit          *genericoptions.AuditOptions
}

// NewOptions returns the defaults: port DefaultPort; the webhook paths and
// health checks are not authorized (kube-apiserver calls webhooks without
// credentials; the kubelet probes health), everything else is, by
// SubjectAccessReview.
func NewOptions(webhookPaths []string) *Options {
	ss := genericoptions.NewSecureServingOptions()
	ss.BindPort = DefaultPort
	authz := genericoptions.NewDelegatingAuthorizationOptions().
		WithAlwaysAllowPaths(append([]string{"/healthz", "/readyz", "/livez"}, webhookPaths...)...)
	return &Options{
		SecureServing:  ss.WithLoopback(),
		Authentication: genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:  authz,
		Audit:          genericoptions.NewAuditOptions(),
	}
}

// AddFlags adds every option's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.SecureServing.AddFlags(fs)
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
	o.Audit.AddFlags(fs)
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	errs = append(errs, o.Audit.Validate()...)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Config is what the server serves.
type Config struct {
	// Cert is the serving certificate (apiserver/certs.Manager).
	Cert dynamiccertificates.CertKeyContentProvider
	// Subresources serves every path under /apis/subresources.kemu.dev/v1alpha1/.
	Subresources http.Handler
	// Webhooks maps each admission path to its handler.
	Webhooks map[string]http.Handler
}

// Server is a prepared kemu-api server.
type Server struct {
	generic *genericapiserver.GenericAPIServer
}

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	scheme.AddUnversionedTypes(schema.GroupVersion{Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
}

// New builds the server from the options and config.
func New(o *Options, cfg Config) (*Server, error) {
	gc := genericapiserver.NewRecommendedConfig(codecs)
	gc.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	if cfg.Cert != nil {
		o.SecureServing.ServerCert.GeneratedCert = cfg.Cert
	}
	if err := o.SecureServing.ApplyTo(&gc.SecureServing, &gc.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("serving: %w", err)
	}
	if err := o.Authentication.ApplyTo(&gc.Authentication, gc.SecureServing, gc.OpenAPIConfig); err != nil {
		return nil, fmt.Errorf("authentication: %w", err)
	}
	if err := o.Authorization.ApplyTo(&gc.Authorization); err != nil {
		return nil, fmt.Errorf("authorization: %w", err)
	}
	if err := o.Audit.ApplyTo(&gc.Config); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	gc.LongRunningFunc = longRunning
	// No storage, no OpenAPI documents: kube-apiserver's aggregator skips
	// an aggregated API without them.
	gc.OpenAPIConfig, gc.OpenAPIV3Config = nil, nil
	gs, err := gc.Complete().New("kemu-api", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("kemu-api server: %w", err)
	}
	installDiscovery(gs)
	if cfg.Subresources != nil {
		gs.Handler.NonGoRestfulMux.HandlePrefix(groupVersionPath+"/", cfg.Subresources)
	}
	for path, h := range cfg.Webhooks {
		gs.Handler.NonGoRestfulMux.Handle(path, h)
	}
	return &Server{generic: gs}, nil
}

// Run serves until ctx ends, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	return s.generic.PrepareRun().RunWithContext(ctx)
}

// streams are the subresources whose requests last as long as the user
// keeps them open (no request timeout).
var streams = func() sets.Set[string] {
	s := sets.New[string]()
	for _, v := range subresources.Verbs {
		if v.Stream {
			s.Insert(v.Resource + "/" + v.Name)
		}
	}
	return s
}()

func longRunning(r *http.Request, ri *apirequest.RequestInfo) bool {
	if ri == nil || !ri.IsResourceRequest {
		return false
	}
	return strings.HasPrefix(r.URL.Path, groupVersionPath+"/") && streams.Has(ri.Resource+"/"+ri.Subresource)
}
