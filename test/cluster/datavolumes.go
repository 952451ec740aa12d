package cluster

import (
	"context"
	_ "embed"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// DataVolumeCRD is the name of the test stand-in for CDI's DataVolume CRD.
const DataVolumeCRD = "datavolumes.cdi.kubevirt.io"

// dataVolumeCRD is a minimal DataVolume CRD (cdi.kubevirt.io/v1beta1,
// namespaced, spec and status kept as written, a status subresource).
//
//go:embed testdata/cdi-datavolume-crd.yaml
var dataVolumeCRD string

// InstallDataVolumeCRD installs a minimal stand-in for CDI's DataVolume CRD
// and waits until it is Established. CDI's real CRD and its controller
// (images from a registry) are not available offline: nothing populates or
// reports on a DataVolume, so a test writes its status itself, as CDI's
// controller would.
func (c *Cluster) InstallDataVolumeCRD() error {
	if _, stderr, err := c.KubectlInput(dataVolumeCRD, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("installing the DataVolume CRD: %w: %s", err, stderr)
	}
	if _, stderr, err := c.Kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/"+DataVolumeCRD); err != nil {
		return fmt.Errorf("waiting for the DataVolume CRD: %w: %s", err, stderr)
	}
	return nil
}

// RemoveDataVolumeCRD deletes the DataVolume CRD (and with it every
// DataVolume) and waits until it is gone.
func (c *Cluster) RemoveDataVolumeCRD() error {
	if _, stderr, err := c.Kubectl("delete", "crd", DataVolumeCRD, "--ignore-not-found", "--wait", "--timeout=60s"); err != nil {
		return fmt.Errorf("removing the DataVolume CRD: %w: %s", err, stderr)
	}
	return nil
}

// dataVolumes is the DataVolume resource of the stand-in CRD.
var dataVolumes = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "datavolumes"}

// DataVolumes is a dynamic client of DataVolumes (the stand-in CRD must be
// installed to use it).
func (c *Cluster) DataVolumes() dynamic.NamespaceableResourceInterface {
	return dynamic.NewForConfigOrDie(c.RESTConfig()).Resource(dataVolumes)
}

// DataVolumeStatus is the status a test writes for a DataVolume, as CDI's
// controller would: its phase, progress and conditions (type, status,
// reason, message).
type DataVolumeStatus struct {
	Phase, Progress string
	Conditions      []DataVolumeCondition
}

// DataVolumeCondition is one of a DataVolume's status.conditions.
type DataVolumeCondition struct {
	Type, Status, Reason, Message string
}

func (s DataVolumeStatus) object() map[string]any {
	st := map[string]any{"phase": s.Phase}
	if s.Progress != "" {
		st["progress"] = s.Progress
	}
	var conds []any
	for _, c := range s.Conditions {
		conds = append(conds, map[string]any{"type": c.Type, "status": c.Status, "reason": c.Reason, "message": c.Message,
			"lastTransitionTime": metav1.Now().UTC().Format("2006-01-02T15:04:05Z")})
	}
	if conds != nil {
		st["conditions"] = conds
	}
	return st
}

// CreateDataVolume creates DataVolume namespace/name with spec and then
// writes its status (the status subresource ignores a create's status).
func (c *Cluster) CreateDataVolume(ctx context.Context, namespace, name string, spec map[string]any,
	status DataVolumeStatus) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": dataVolumes.GroupVersion().String(),
		"kind": "DataVolume", "metadata": map[string]any{"name": name, "namespace": namespace}, "spec": spec}}
	created, err := c.DataVolumes().Namespace(namespace).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating DataVolume %s/%s: %w", namespace, name, err)
	}
	if status.Phase == "" {
		return created, nil
	}
	return c.SetDataVolumeStatus(ctx, namespace, name, status)
}

// SetDataVolumeStatus replaces DataVolume namespace/name's status (retrying
// on conflicts until ctx ends).
func (c *Cluster) SetDataVolumeStatus(ctx context.Context, namespace, name string, status DataVolumeStatus) (*unstructured.Unstructured, error) {
	client := c.DataVolumes().Namespace(namespace)
	var out *unstructured.Unstructured
	err := Poll(ctx, func() error {
		dv, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return StopPolling{err}
		}
		dv.Object["status"] = status.object()
		out, err = client.UpdateStatus(ctx, dv, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return err
		}
		if err != nil {
			return StopPolling{err}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("writing DataVolume %s/%s's status: %w", namespace, name, err)
	}
	return out, nil
}
