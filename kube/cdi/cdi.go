// Package cdi is what kemu knows of CDI's DataVolumes (cdi.kubevirt.io,
// the containerized data importer): the group, kind and phases, read
// through the dynamic client (kemu does not import CDI's Go module), and
// Watcher, which asks discovery whether CDI's API is installed, again
// periodically and on demand, and keeps an informer of DataVolumes while it
// is. The VMI controller waits for DataVolumes, the VM controller creates
// them and kemu-api's admission refuses dataVolumeTemplates without CDI.
package cdi

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
)

// CDI's API: DataVolumes of cdi.kubevirt.io/v1beta1.
const (
	Group    = "cdi.kubevirt.io"
	Version  = "v1beta1"
	Resource = "datavolumes"
	Kind     = "DataVolume"
)

// GroupVersion is cdi.kubevirt.io/v1beta1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// GVR is the DataVolume resource.
var GVR = GroupVersion.WithResource(Resource)

// GVK is the DataVolume kind.
var GVK = GroupVersion.WithKind(Kind)

// Phase is a DataVolume's status.phase (CDI's DataVolumePhase).
type Phase string

// The phases kemu acts on (CDI has more; any other one is "in progress").
const (
	PhaseSucceeded            Phase = "Succeeded"
	PhaseFailed               Phase = "Failed"
	PhaseWaitForFirstConsumer Phase = "WaitForFirstConsumer"
	PhasePendingPopulation    Phase = "PendingPopulation"
	PhaseImportInProgress     Phase = "ImportInProgress"
)

// ConditionReady is a DataVolume's Ready condition type; ConditionRunning
// carries an importer's failure reason; ConditionBound says whether its
// claim is bound.
const (
	ConditionReady   = "Ready"
	ConditionRunning = "Running"
	ConditionBound   = "Bound"
)

// AllowClaimAdoptionAnnotation lets CDI adopt an existing PVC of the
// DataVolume's name (KubeVirt sets it on every DataVolume it creates).
const AllowClaimAdoptionAnnotation = "cdi.kubevirt.io/allowClaimAdoption"

// Condition is one of a DataVolume's status.conditions.
type Condition struct {
	Type, Status, Reason, Message string
}

// DataVolume is what kemu reads of one.
type DataVolume struct {
	Namespace, Name string
	UID             types.UID
	ResourceVersion string
	OwnerReferences []metav1.OwnerReference
	Phase           Phase
	// Progress is status.progress ("45.00%"), "" when not given.
	Progress   string
	Conditions []Condition
}

// Condition returns the condition of type t, if any.
func (d *DataVolume) Condition(t string) (Condition, bool) {
	for _, c := range d.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return Condition{}, false
}

// FailureMessage says why a Failed DataVolume failed: its Running (else
// Ready) condition's reason and message.
func (d *DataVolume) FailureMessage() string {
	for _, t := range []string{ConditionRunning, ConditionReady} {
		if c, ok := d.Condition(t); ok && (c.Reason != "" || c.Message != "") {
			return fmt.Sprintf("DataVolume %s failed: %s: %s", d.Name, c.Reason, c.Message)
		}
	}
	return fmt.Sprintf("DataVolume %s failed", d.Name)
}

// HasError says whether the DataVolume failed or its importer stopped on
// an error (KubeVirt's HasDataVolumeErrors: phase Failed, or Running False
// with reason Error or ImagePullFailed).
func (d *DataVolume) HasError() bool {
	if d.Phase == PhaseFailed {
		return true
	}
	c, ok := d.Condition(ConditionRunning)
	return ok && c.Status == "False" && (c.Reason == "Error" || c.Reason == "ImagePullFailed")
}

// Provisioning says whether the DataVolume is still being populated
// (KubeVirt's HasDataVolumeProvisioning): not Succeeded or
// PendingPopulation, and not waiting for its first consumer with an
// unbound claim.
func (d *DataVolume) Provisioning() bool {
	if d.Phase == PhaseSucceeded || d.Phase == PhasePendingPopulation {
		return false
	}
	bound, ok := d.Condition(ConditionBound)
	return (ok && bound.Status == "True") || d.Phase != PhaseWaitForFirstConsumer
}

// FromUnstructured reads a DataVolume object.
func FromUnstructured(u *unstructured.Unstructured) *DataVolume {
	dv := &DataVolume{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(),
		ResourceVersion: u.GetResourceVersion(), OwnerReferences: u.GetOwnerReferences()}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	dv.Phase = Phase(phase)
	dv.Progress, _, _ = unstructured.NestedString(u.Object, "status", "progress")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		dv.Conditions = append(dv.Conditions, Condition{Type: str("type"), Status: str("status"),
			Reason: str("reason"), Message: str("message")})
	}
	return dv
}

// Installed asks discovery whether the API server serves DataVolumes of
// cdi.kubevirt.io/v1beta1. A group the server does not know is false, nil;
// any other failure is an error (the caller asks again later).
func Installed(ctx context.Context, d discovery.DiscoveryInterface) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	list, err := d.ServerResourcesForGroupVersion(GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", GroupVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Name == Resource && r.Kind == Kind {
			return true, nil
		}
	}
	return false, nil
}

// Probe remembers Installed's answer for TTL (errors are not remembered),
// for kemu-api's admission, which asks on every VM with
// dataVolumeTemplates.
type Probe struct {
	Discovery discovery.DiscoveryInterface
	TTL       time.Duration

	mu        sync.Mutex
	at        time.Time
	installed bool
}

// Installed answers from the last discovery younger than TTL, else asks.
func (p *Probe) Installed(ctx context.Context) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < p.TTL {
		return p.installed, nil
	}
	ok, err := Installed(ctx, p.Discovery)
	if err != nil {
		return false, err
	}
	p.installed, p.at = ok, time.Now()
	return ok, nil
}
