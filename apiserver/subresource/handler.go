package subresource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// maxBody bounds a request body (the options are a few fields).
const maxBody = 64 << 10

// Handler serves every subresources.kemu.dev path.
type Handler struct {
	Kemu versioned.Interface
	// Nodes reaches the node agents (console, vnc, guest reports, stats).
	Nodes NodeAgents
	// Version is what the version endpoint reports.
	Version string
	// Stopping is closed when kemu-api shuts down: open streams end with
	// a close frame saying so.
	Stopping <-chan struct{}
}

var (
	vmiResource = schema.GroupResource{Group: v1.GroupName, Resource: subresources.VMIs}
	vmResource  = schema.GroupResource{Group: v1.GroupName, Resource: subresources.VMs}
)

// ServeHTTP routes by the request info the generic server resolved.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ri, ok := apirequest.RequestInfoFrom(r.Context())
	if !ok || !ri.IsResourceRequest || ri.APIGroup != subresources.Group || ri.APIVersion != subresources.Version {
		writeError(w, apierrors.NewNotFound(schema.GroupResource{Group: subresources.Group}, r.URL.Path))
		return
	}
	if ri.Resource == subresources.VersionResource && ri.Namespace == "" && ri.Name == "" {
		h.version(w, r)
		return
	}
	verb, ok := subresources.Lookup(ri.Resource, ri.Subresource)
	if !ok || ri.Namespace == "" || ri.Name == "" {
		writeError(w, apierrors.NewNotFound(schema.GroupResource{Group: subresources.Group, Resource: ri.Resource + "/" + ri.Subresource}, ri.Name))
		return
	}
	if r.Method != verb.Method {
		writeError(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: subresources.Group, Resource: verb.Subresource()}, r.Method))
		return
	}
	logger := klog.FromContext(r.Context()).WithValues("verb", verb.Name, "object", klog.KRef(ri.Namespace, ri.Name))
	if u, ok := apirequest.UserFrom(r.Context()); ok {
		logger = logger.WithValues("user", u.GetName())
	}
	ctx := klog.NewContext(r.Context(), logger)
	r = r.WithContext(ctx)
	switch verb {
	case subresources.Console, subresources.VNC:
		h.stream(w, r, verb, ri.Namespace, ri.Name)
	case subresources.GuestOSInfoVerb, subresources.UserListVerb, subresources.FilesystemListVerb:
		h.guest(w, r, verb, ri.Namespace, ri.Name)
	case subresources.StatsVerb:
		h.stats(w, r, ri.Namespace, ri.Name)
	case subresources.Pause, subresources.Unpause, subresources.SoftReboot:
		h.vmiRequest(w, r, verb, ri.Namespace, ri.Name)
	case subresources.Migrate:
		h.migrate(w, r, ri.Namespace, ri.Name)
	case subresources.Start, subresources.Stop, subresources.Restart:
		h.vmRequest(w, r, verb, ri.Namespace, ri.Name)
	default:
		writeError(w, apierrors.NewNotFound(vmiResource, ri.Name))
	}
}

func (h *Handler) version(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: subresources.Group, Resource: subresources.VersionResource}, r.Method))
		return
	}
	writeJSON(w, http.StatusOK, subresources.ServerVersion{
		GitVersion: h.Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
	})
}

// readOptions decodes the optional JSON body into opts and returns whether
// dryRun is ["All"].
func readOptions(r *http.Request, opts any, dryRun func() []string) (bool, error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		return false, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
	}
	if len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(opts); err != nil {
			return false, apierrors.NewBadRequest(fmt.Sprintf("the request body: %v", err))
		}
	}
	switch dr := dryRun(); {
	case len(dr) == 0:
		return false, nil
	case len(dr) == 1 && dr[0] == subresources.DryRunAll:
		return true, nil
	default:
		return false, apierrors.NewBadRequest(fmt.Sprintf("dryRun: %q: the only value is %q", dr, subresources.DryRunAll))
	}
}

// writeError writes err as a metav1.Status; errors that are not API
// errors are internal.
func writeError(w http.ResponseWriter, err error) {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	st := se.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	writeJSON(w, int(st.Code), st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.V(2).InfoS("Writing a reply", "err", err)
	}
}

// apiError turns a client error into what the user should see: API
// errors as they are, anything else (transport) as 503.
func apiError(ctx context.Context, what string, err error) error {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return err
	}
	if ctx.Err() != nil {
		return apierrors.NewTimeoutError(what+": "+err.Error(), 1)
	}
	return apierrors.NewServiceUnavailable(what + ": " + err.Error())
}
