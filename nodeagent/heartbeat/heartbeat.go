// Package heartbeat keeps a node's kemu labels and heartbeat annotation up
// to date: kemu.dev/schedulable (true while the node agent runs and its
// device plugins are registered, false when it stops), kemu.dev/kvm (the
// KVM probe's verdict), machine-type.node.kemu.dev/<type> (the machine
// types of the node's QEMU; labels of types it no longer has are removed)
// and kemu.dev/heartbeat (a timestamp, refreshed every interval with
// jitter), which the node controller checks for staleness. Readiness and
// the KVM verdict are watched in between: a change is written at once (a
// node becomes schedulable as soon as its plugins are registered, and gets
// kemu.dev/kvm=true when the background KVM probe finishes).
package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Defaults.
const (
	DefaultInterval = time.Minute
	DefaultJitter   = 0.2 // up to 20% added to each interval
	// DefaultWatch is how often Ready and KVM are checked between beats.
	DefaultWatch = time.Second
	// stopTimeout bounds the last patch (schedulable=false) after the
	// context ended.
	stopTimeout = 10 * time.Second
)

// Config says which node to beat for and how.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// Interval between heartbeats (default DefaultInterval) and the jitter
	// factor added to each (default DefaultJitter; negative = none).
	Interval time.Duration
	Jitter   float64
	// KVM reports whether KVM runs guests on this node (the probe's
	// verdict). Required; it is asked every Watch, so it must not block
	// (the node agent runs the probe in the background).
	KVM func(ctx context.Context) bool
	// Ready reports whether the node can run VMs (device plugins
	// registered). nil means always. Asked every Watch.
	Ready func() bool
	// Watch is how often Run checks Ready and KVM between beats; a change
	// is written at once (default DefaultWatch).
	Watch time.Duration
	// Written, when set, is called by Run after each successful patch with
	// the kemu.dev/schedulable value it wrote.
	Written func(schedulable bool)
	// MachineTypes are the machine types of the node's QEMU (aliases
	// included); nil leaves the machine type labels alone.
	MachineTypes []string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c *Config) defaults() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("heartbeat: no Kubernetes client"))
	}
	if c.NodeName == "" {
		errs = append(errs, errors.New("heartbeat: no node name"))
	}
	if c.KVM == nil {
		errs = append(errs, errors.New("heartbeat: no KVM probe"))
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Watch <= 0 {
		c.Watch = DefaultWatch
	}
	if c.Jitter == 0 {
		c.Jitter = DefaultJitter
	}
	if c.Jitter < 0 {
		c.Jitter = 0
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return errors.Join(errs...)
}

// state is what a beat writes besides the timestamp and machine types.
type state struct{ ready, kvm bool }

func (c *Config) state(ctx context.Context) state {
	return state{ready: c.Ready == nil || c.Ready(), kvm: c.KVM(ctx)}
}

// Beat writes one heartbeat: the labels and the timestamp.
func Beat(ctx context.Context, c Config) error {
	if err := c.defaults(); err != nil {
		return err
	}
	return beat(ctx, c, c.state(ctx))
}

func beat(ctx context.Context, c Config, st state) error {
	labels := map[string]any{
		v1.NodeSchedulableLabel: strconv.FormatBool(st.ready),
		v1.NodeKVMLabel:         strconv.FormatBool(st.kvm),
	}
	want := map[string]bool{}
	for _, m := range c.MachineTypes {
		if k := v1.NodeMachineTypeLabelPrefix + m; len(validation.IsQualifiedName(k)) == 0 {
			labels[k], want[k] = "true", true
		}
	}
	node, err := patch(ctx, c, labels, c.Now().UTC().Format(time.RFC3339))
	if err != nil || c.MachineTypes == nil {
		return err
	}
	// The patch's reply is the node: remove the machine type labels of
	// types QEMU no longer lists (the node agent may not read Nodes).
	stale := map[string]any{}
	for k := range node.Labels {
		if strings.HasPrefix(k, v1.NodeMachineTypeLabelPrefix) && !want[k] {
			stale[k] = nil
		}
	}
	if len(stale) == 0 {
		return nil
	}
	_, err = patch(ctx, c, stale, "")
	return err
}

// Run beats until ctx ends, then marks the node unschedulable. Between
// beats it checks Ready and KVM every Watch and beats at once when either
// changed. A failed beat is logged and retried at the next interval (or
// change); Run returns the error of the final patch.
func Run(ctx context.Context, c Config) error {
	if err := c.defaults(); err != nil {
		return err
	}
	klog.InfoS("Heartbeat started", "node", c.NodeName, "interval", c.Interval)
	watch := time.NewTicker(c.Watch)
	defer watch.Stop()
	for ctx.Err() == nil {
		st := c.state(ctx)
		if err := beat(ctx, c, st); err != nil {
			if ctx.Err() == nil {
				klog.ErrorS(err, "Heartbeat failed", "node", c.NodeName)
			}
		} else {
			klog.V(2).InfoS("Heartbeat", "node", c.NodeName, "schedulable", st.ready, "kvm", st.kvm)
			if c.Written != nil {
				c.Written(st.ready)
			}
		}
		period := c.Interval
		if c.Jitter > 0 {
			period = wait.Jitter(period, c.Jitter)
		}
		next := time.NewTimer(period)
	idle:
		for {
			select {
			case <-ctx.Done():
				break idle
			case <-next.C:
				break idle
			case <-watch.C:
				if now := c.state(ctx); now != st {
					klog.InfoS("Node state changed, heartbeat now", "node", c.NodeName, "schedulable", now.ready, "kvm", now.kvm)
					break idle
				}
			}
		}
		next.Stop()
	}

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if c.Written != nil {
		c.Written(false)
	}
	if err := MarkUnschedulable(sctx, c); err != nil {
		return err
	}
	klog.InfoS("Heartbeat stopped, node marked unschedulable", "node", c.NodeName)
	return nil
}

// MarkUnschedulable sets kemu.dev/schedulable=false on the node.
func MarkUnschedulable(ctx context.Context, c Config) error {
	if err := c.defaults(); err != nil {
		return err
	}
	_, err := patch(ctx, c, map[string]any{v1.NodeSchedulableLabel: "false"}, "")
	return err
}

// patch merges labels (a nil value removes one; and the heartbeat
// annotation when not "") into the node and returns the patched node.
func patch(ctx context.Context, c Config, labels map[string]any, heartbeat string) (*corev1.Node, error) {
	meta := map[string]any{"labels": labels}
	if heartbeat != "" {
		meta["annotations"] = map[string]string{v1.NodeHeartbeatAnnotation: heartbeat}
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	node, err := c.Client.CoreV1().Nodes().Patch(ctx, c.NodeName, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "kemu-nodeagent"})
	if err != nil {
		return nil, fmt.Errorf("heartbeat: patching node %s: %w", c.NodeName, err)
	}
	return node, nil
}
