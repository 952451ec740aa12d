package vmi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	kubestatus "github.com/kemu-dev/kemu/kube/status"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/hostdisk"
	"github.com/kemu-dev/kemu/nodeagent/launcherclient"
)

// sync reconciles one VMI and its launchers; it returns when to look again
// (0: on the next event).
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	vmi, err := c.vmiLister.VirtualMachineInstances(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.drop(key)
		c.written.Forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if !c.concerns(vmi) || vmi.Status.Phase.IsFinal() {
		// Not (or no longer) ours to run, or over: let the launchers go.
		c.drop(key)
		return 0, nil
	}
	onNode := vmi.Status.NodeName == c.cfg.NodeName
	if c.written.Stale(key, vmi.ResourceVersion) {
		// Our last status write is not in the cache yet; its event
		// requeues us.
		return 5 * time.Second, nil
	}
	logger := klog.FromContext(ctx).WithValues("vmi", key)
	ctx = klog.NewContext(ctx, logger)
	refs := c.launcherRefs(vmi)
	var after time.Duration
	var source *launcherState
	var sourcePod *corev1.Pod
	var writes []migrationWrite
	for i, st := range c.entries(key, vmi.UID, refs) {
		a, err := c.syncLauncher(ctx, st, vmi, refs[i].pod)
		if err != nil {
			return 0, err
		}
		after = minPositive(after, a)
		switch st = c.current(st); st.role {
		case RoleSource:
			source, sourcePod = st, refs[i].pod
		case RoleTarget:
			writes = append(writes, c.syncTarget(ctx, st, vmi)...)
		}
	}
	if !onNode {
		// A migration's target here (before the handoff), or its source
		// (after it): nothing of the domain reaches the VMI; the target role
		// writes its migrationState fields, the source only finalizes.
		if source != nil {
			_, a := c.syncSource(ctx, source, vmi, false)
			after = minPositive(after, a)
		}
		if ms := vmi.Status.MigrationState; len(writes) > 0 && ms != nil && ms.TargetNode == c.cfg.NodeName {
			if err := c.updateStatus(ctx, vmi, nil, nil, migrationChanges(writes, nil)); err != nil {
				return 0, err
			}
		}
		return after, nil
	}
	if source == nil {
		// No launcher Pod here: a Running VMI's launcher is gone (unless the
		// guest moved to a migration's target); else the controller has not
		// recorded the Pod yet.
		o := Observation{Now: metav1.Now()}
		ms := vmi.Status.MigrationState
		if vmi.Status.Phase == v1.Running && !(ms != nil && ms.Completed && ms.TargetNodeDomainReadyTimestamp != nil) {
			o.Gone = fmt.Sprintf("no launcher Pod of the VMI on node %s", c.cfg.NodeName)
		} else {
			after = c.cfg.SocketPoll
		}
		if err := c.updateStatus(ctx, vmi, &o, nil, migrationChanges(writes, nil)); err != nil {
			return 0, err
		}
		return after, nil
	}
	if source.client != nil {
		switch {
		case vmi.DeletionTimestamp != nil || (sourcePod != nil && sourcePod.DeletionTimestamp != nil):
			c.startShutdown(ctx, source, vmi)
		default:
			c.ensureSynced(ctx, source, vmi)
			a, err := c.desiredState(ctx, source, vmi)
			if err != nil {
				return 0, err
			}
			after = minPositive(after, a)
			w, a := c.syncSource(ctx, source, vmi, true)
			writes = append(writes, w...)
			after = minPositive(after, a)
		}
	}
	// Fewer writes on the way to Running (issue 21): while the launcher
	// starts the VM for its first Sync, whose answer comes with the VM
	// running (or failed), nothing is written — that answer's sync writes
	// Running and Synchronized at once; and LiveMigratable waits for the
	// launcher, to go with its first domain instead of alone.
	if source.startingVM() && len(writes) == 0 {
		return after, nil
	}
	var live *v1.VirtualMachineInstanceCondition
	if source.client != nil || vmi.Status.Phase == v1.Running {
		pvcs, err := c.vmiPVCs(ctx, key, vmi)
		if err != nil {
			return 0, err
		}
		l := liveMigratable(vmi, pvcs)
		live = &l
	}
	o := source.observation(time.Now())
	o.PodReady = podReadyCondition(sourcePod)
	o.Pod = sourcePod
	if err := c.updateStatus(ctx, vmi, &o, source.getRefusal(), migrationChanges(writes, live)); err != nil {
		return 0, err
	}
	return after, nil
}

// migrationChanges applies the migration writes and (the source role's)
// LiveMigratable condition (nil: untouched).
func migrationChanges(writes []migrationWrite, live *v1.VirtualMachineInstanceCondition) func(*v1.VirtualMachineInstance, metav1.Time) {
	return func(vmi *v1.VirtualMachineInstance, now metav1.Time) {
		applyMigrationWrites(vmi, writes, now)
		if live != nil {
			setCondition(vmi, *live, now)
		}
	}
}

// syncLauncher does one launcher's own work: a connection whose socket no
// longer verifies is dropped (nothing more goes to it) and the entry starts
// over from the socket; an entry not connected yet connects. It returns when
// to look again.
func (c *Controller) syncLauncher(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance, pod *corev1.Pod) (time.Duration, error) {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("podUID", st.podUID, "role", st.role))
	switch lost := st.getLost(); {
	case lost != nil:
		return c.refuse(ctx, c.replace(st), vmi, lost), nil
	case st.client == nil && !st.isGone():
		return c.connect(ctx, st, vmi, pod)
	}
	return 0, nil
}

// current is the entry now kept for st's Pod (a replaced one's
// successor).
func (c *Controller) current(st *launcherState) *launcherState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.launchers[st.podUID]; cur != nil {
		return cur
	}
	return st
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 {
		return b
	}
	if b <= 0 || a < b {
		return a
	}
	return b
}

// connect waits for the launcher's socket of st's Pod (pod: nil when only
// status.activePods names it) and connects to it, verified
// (launcherclient.Target: no symlinks, a socket, the Pod's process, the
// VMI's UID); what does not verify is refused (refuse). The source of a
// VMI that was Running (so its launcher was) that is no longer there is
// marked gone; another launcher Pod of the VMI may simply not have started
// yet, and is waited for.
func (c *Controller) connect(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance, pod *corev1.Pod) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	wasRunning := vmi.Status.Phase == v1.Running && st.role == RoleSource
	target := launcherclient.Target{KubeletRoot: c.cfg.KubeletRoot, PodUID: st.podUID, VMIUID: vmi.UID}
	sock := target.SocketPath()
	ready, err := launcherclient.Ready(target)
	switch {
	case errors.Is(err, launcherclient.ErrUnverified):
		return c.refuse(ctx, st, vmi, err), nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return 0, fmt.Errorf("launcher socket %s: %w", sock, err)
	}
	if !ready {
		if !wasRunning {
			return c.waitSocket(target, st.key), nil
		}
		if err != nil && pod != nil {
			// The Pod is there but its volume is not where we look: a wrong
			// --kubelet-root must not fail running VMs.
			logger.Error(err, "The launcher Pod's sockets volume is missing; is --kubelet-root right?", "pod", klog.KObj(pod))
			return 10 * c.cfg.SocketPoll, nil
		}
		st.setGone(fmt.Sprintf("the launcher's socket %s is gone", sock))
		return 0, nil
	}
	dctx, cancel := context.WithCancel(c.baseCtx())
	client, info, err := launcherclient.Dial(dctx, target)
	if err != nil {
		cancel()
		if errors.Is(err, launcherclient.ErrUnverified) {
			return c.refuse(ctx, st, vmi, err), nil
		}
		launcherConnects.WithLabelValues("error").Inc()
		if aerr := launcherclient.Alive(target); errors.Is(aerr, launcherclient.ErrGone) && wasRunning {
			st.setGone(fmt.Sprintf("the launcher does not answer on %s: %v", sock, aerr))
			return 0, nil
		}
		return 0, err
	}
	if c.sockets != nil {
		c.sockets.Forget(sock)
	}
	launcherConnects.WithLabelValues("success").Inc()
	launcherConnections.Inc()
	st.mu.Lock() // CurrentLauncher reads them from other goroutines
	st.ctx, st.cancel, st.client, st.info = dctx, cancel, client, info
	st.mu.Unlock()
	logger.Info("Connected to the launcher", "socket", sock, "pid", client.PeerPID(), "launcherVersion", info.GetLauncherVersion(),
		"api", info.GetVersion())
	c.verified(st, vmi, client)
	go c.follow(st, logger)
	return 0, nil
}

// socketDirPoll is how soon a launcher's sockets directory, not there yet
// (the kubelet is setting up the Pod's volumes), is looked for again.
const socketDirPoll = 100 * time.Millisecond

// waitSocket is how long until the sync of key looks for t's socket again:
// when the socket watch fires (socketWatch), SocketPoll at the latest, or
// soon if the watch could not be set (no sockets directory yet).
func (c *Controller) waitSocket(t launcherclient.Target, key string) time.Duration {
	if c.sockets == nil {
		return c.cfg.SocketPoll
	}
	sock := t.SocketPath()
	if err := c.sockets.Watch(sock, key); err != nil {
		return min(c.cfg.SocketPoll, socketDirPoll)
	}
	// It may have appeared before the watch was set.
	if ready, err := launcherclient.Ready(t); err == nil && ready {
		c.sockets.Forget(sock)
		return time.Millisecond
	}
	return c.cfg.SocketPoll
}

// baseCtx is Run's context: launcher goroutines live until Run ends (or
// the VMI is dropped), not for one sync.
func (c *Controller) baseCtx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runCtx == nil {
		return context.Background()
	}
	return c.runCtx
}

// follow mirrors the launcher's domain changes into st until the domain is
// Shutoff, the launcher is gone or st is closed.
func (c *Controller) follow(st *launcherState, logger klog.Logger) {
	err := st.client.Follow(st.ctx, 0, func(d *rpc.Domain) {
		logger.V(2).Info("Domain changed", "state", d.GetState(), "reason", d.GetReason(), "seq", d.GetSeq(),
			"agentConnected", d.GetAgentConnected())
		st.setDomain(d)
		c.queue.Add(st.key)
	}, func(err error) {
		watchReconnects.Inc()
		logger.Info("WatchDomain broke; resuming", "err", err)
	})
	var u *launcherclient.UnverifiedError
	switch {
	case errors.As(err, &u):
		logger.Info("The launcher's socket no longer verifies; dropping the connection", "err", err)
		st.setLost(u)
	case errors.Is(err, launcherclient.ErrGone):
		logger.Info("The launcher is gone", "err", err)
		st.setGone(err.Error())
	case err != nil && st.ctx.Err() == nil:
		logger.Error(err, "Following the domain")
	}
	c.queue.Add(st.key)
}

// vmiJSON is what Sync sends: identity and spec (the launcher decodes
// strictly and compares specs).
func vmiJSON(vmi *v1.VirtualMachineInstance) ([]byte, error) {
	out := &v1.VirtualMachineInstance{
		TypeMeta: metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: vmi.Name, Namespace: vmi.Namespace, UID: vmi.UID,
			Labels: vmi.Labels, Annotations: vmi.Annotations},
		Spec: *vmi.Spec.DeepCopy(),
	}
	return json.Marshal(out)
}

// ensureSynced calls Sync (in the background: the first one starts the VM)
// once per metadata.generation. On a running launcher it is a no-op that
// only checks the spec.
func (c *Controller) ensureSynced(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance) {
	st.mu.Lock()
	if st.syncing || st.syncedGen == vmi.Generation || (st.domain != nil && st.domain.GetState() == stateShutoff) {
		st.mu.Unlock()
		return
	}
	st.syncing = true
	st.mu.Unlock()
	logger := klog.FromContext(ctx)
	// The hostDisks the kubelet mounted must be the files beneath the
	// allowed directories, reached without symlinks: else QEMU never starts.
	if errs := hostdisk.Check(c.cfg.HostRoot, fmt.Sprintf("/proc/%d/root", st.client.PeerPID()), c.cfg.HostDiskDirs, vmi); len(errs) > 0 {
		msg := errs.ToAggregate().Error()
		logger.Error(errs.ToAggregate(), "Refusing the VMI's hostDisks: no Sync")
		c.cfg.Recorder.Eventf(vmi, corev1.EventTypeWarning, EventHostDiskRefused, "Not starting the VM: %s", msg)
		st.mu.Lock()
		st.syncing, st.syncedGen, st.synced, st.syncErr = false, vmi.Generation, false, msg
		st.mu.Unlock()
		return
	}
	b, err := vmiJSON(vmi)
	if err != nil {
		st.mu.Lock()
		st.syncing, st.syncedGen, st.syncErr = false, vmi.Generation, err.Error()
		st.mu.Unlock()
		return
	}
	gen := vmi.Generation
	go func() {
		sctx, cancel := context.WithTimeout(st.ctx, syncTimeout)
		defer cancel()
		start := time.Now()
		resp, err := st.client.Sync(sctx, &rpc.SyncRequest{VmiJson: b})
		countRPC("Sync", err)
		st.mu.Lock()
		st.syncing = false
		switch code := status.Code(err); {
		case err == nil:
			st.syncedGen, st.synced, st.syncErr = gen, true, ""
		case code == codes.InvalidArgument || code == codes.FailedPrecondition || code == codes.Aborted:
			// Will not change until the spec does.
			st.syncedGen, st.synced, st.syncErr = gen, false, status.Convert(err).Message()
		}
		st.mu.Unlock()
		if err != nil {
			logger.Error(err, "Sync")
			if st.ctx.Err() == nil && status.Code(err) != codes.InvalidArgument && status.Code(err) != codes.FailedPrecondition &&
				status.Code(err) != codes.Aborted {
				c.queue.AddAfter(st.key, 2*time.Second)
			}
		} else {
			st.setDomain(resp.GetDomain())
			logger.Info("Synced the VMI with its launcher", "action", resp.GetAction(), "took", time.Since(start).Round(time.Millisecond))
		}
		c.queue.Add(st.key)
	}()
}

// desiredState applies the annotations (pause, soft reboot) and refreshes
// the guest agent's information.
func (c *Controller) desiredState(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance) (time.Duration, error) {
	d := st.getDomain()
	if d == nil || !running(d.GetState()) {
		return 0, nil
	}
	logger := klog.FromContext(ctx)
	want := vmi.Annotations[v1.VMIPausedAnnotation]
	switch {
	case want == "true" && d.GetState() == stateRunning:
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := st.client.Pause(rctx, &rpc.Empty{})
		cancel()
		countRPC("Pause", err)
		if err != nil && status.Code(err) != codes.FailedPrecondition {
			return 0, fmt.Errorf("pause: %w", err)
		}
		logger.Info("Paused the guest", "annotation", v1.VMIPausedAnnotation)
	case want != "true" && d.GetState() == statePaused &&
		(d.GetReason() == domainReasonUser || (d.GetReason() == domainReasonStartPaused && want == "false")):
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := st.client.Unpause(rctx, &rpc.Empty{})
		cancel()
		countRPC("Unpause", err)
		if err != nil && status.Code(err) != codes.FailedPrecondition {
			return 0, fmt.Errorf("unpause: %w", err)
		}
		logger.Info("Unpaused the guest", "annotation", v1.VMIPausedAnnotation)
	}
	if err := c.softReboot(ctx, st, vmi, d); err != nil {
		return 0, err
	}
	return c.refreshGuestInfo(ctx, st, d), nil
}

// softReboot acts once on each kemu.dev/soft-reboot value that differs
// from kemu.dev/soft-reboot-done, then records it there. The request is the
// launcher's SoftReboot RPC: the guest agent's guest-shutdown mode=reboot
// when the agent is connected, else Ctrl+Alt+Delete on the guest's
// keyboard, which the guest OS answers by rebooting itself as on a console
// three-finger salute (ACPI has no reboot button; system_reset would be a
// hard reset). The reply names the method, which the log records.
func (c *Controller) softReboot(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance, d *rpc.Domain) error {
	req := vmi.Annotations[v1.VMISoftRebootAnnotation]
	if req == "" || req == vmi.Annotations[v1.VMISoftRebootDoneAnnotation] {
		return nil
	}
	st.mu.Lock()
	done := st.rebooted == req
	st.mu.Unlock()
	logger := klog.FromContext(ctx)
	if !done {
		if d.GetState() != stateRunning {
			return nil // paused or shutting down: later
		}
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := st.client.SoftReboot(rctx, &rpc.Empty{})
		cancel()
		countRPC("SoftReboot", err)
		if status.Code(err) == codes.FailedPrecondition {
			return nil // no longer running: later
		}
		if err != nil {
			return fmt.Errorf("soft reboot: %w", err)
		}
		st.mu.Lock()
		st.rebooted = req
		st.mu.Unlock()
		logger.Info("Soft reboot requested", "request", req, "method", resp.GetMethod())
		c.cfg.Recorder.Eventf(vmi, corev1.EventTypeNormal, EventSoftRebooted, "Soft reboot sent to the guest (%s)", resp.GetMethod())
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{v1.VMISoftRebootDoneAnnotation: req}}})
	if err != nil {
		return err
	}
	_, err = c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name,
		types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// refreshGuestInfo follows the guest agent. The launcher learns whether
// the agent answers only when asked, so while it is not connected (and the
// guest runs) a GuestPing goes out every AgentProbeInterval in the
// background; once connected, GuestInfo (OS info, interfaces) is asked at
// most every GuestInfoInterval, and a failing one is followed by a GuestPing
// so that a lost agent shows. It returns when to look again.
func (c *Controller) refreshGuestInfo(ctx context.Context, st *launcherState, d *rpc.Domain) time.Duration {
	if !d.GetAgentConnected() {
		st.mu.Lock()
		st.guest = nil
		st.mu.Unlock()
		if d.GetState() != stateRunning {
			return 0
		}
		return c.probeAgent(ctx, st)
	}
	st.mu.Lock()
	age := time.Since(st.guestAt)
	have := st.guest != nil
	st.mu.Unlock()
	if have && age < c.cfg.GuestInfoInterval {
		return c.cfg.GuestInfoInterval - age
	}
	rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	g, err := st.client.GuestInfo(rctx, &rpc.Empty{})
	cancel()
	countRPC("GuestInfo", err)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("GuestInfo failed; keeping the last answer", "err", err)
		st.mu.Lock()
		st.probedAt = time.Time{}
		st.mu.Unlock()
		c.probeAgent(ctx, st)
		return c.cfg.AgentProbeInterval
	}
	st.mu.Lock()
	st.guest, st.guestAt = g, time.Now()
	st.mu.Unlock()
	return c.cfg.GuestInfoInterval
}

// probeAgent sends one GuestPing in the background unless one is under way
// or the last was less than AgentProbeInterval ago. The launcher updates
// the domain's agent_connected from the outcome (and the watch brings it).
func (c *Controller) probeAgent(ctx context.Context, st *launcherState) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	if wait := c.cfg.AgentProbeInterval - time.Since(st.probedAt); st.probing || wait > 0 {
		return max(wait, c.cfg.AgentProbeInterval/2)
	}
	st.probing = true
	logger := klog.FromContext(ctx)
	go func() {
		pctx, cancel := context.WithTimeout(st.ctx, agentProbeTimeout)
		_, err := st.client.GuestPing(pctx, &rpc.Empty{})
		cancel()
		countRPC("GuestPing", err)
		st.mu.Lock()
		st.probing, st.probedAt = false, time.Now()
		st.mu.Unlock()
		if err != nil {
			logger.V(4).Info("The guest agent does not answer (yet)", "err", err)
		}
	}()
	return c.cfg.AgentProbeInterval
}

// startShutdown shuts the guest down (once) when the VMI or its Pod is
// being deleted: Shutdown with the VMI's grace period (ACPI power button
// until it ends, then quit, then kill, in the launcher), and Kill if the
// domain is not Shutoff after that. A grace period of 0 kills at once.
func (c *Controller) startShutdown(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance) {
	st.mu.Lock()
	if st.shutdown || st.domain == nil || st.domain.GetState() == stateShutoff || st.gone != "" {
		st.mu.Unlock()
		return
	}
	st.shutdown = true
	st.mu.Unlock()
	logger := klog.FromContext(ctx)
	var grace int64 = -1
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	logger.Info("Shutting the guest down", "gracePeriodSeconds", grace, "vmiDeleting", vmi.DeletionTimestamp != nil)
	go func() {
		defer c.queue.Add(st.key)
		var final *rpc.Domain
		if grace != 0 {
			wait := time.Duration(max(grace, v1.DefaultTerminationGracePeriodSeconds))*time.Second + time.Minute
			sctx, cancel := context.WithTimeout(st.ctx, wait)
			resp, err := st.client.Shutdown(sctx, &rpc.ShutdownRequest{GracePeriodSeconds: max(grace, 0)})
			cancel()
			countRPC("Shutdown", err)
			if err != nil {
				logger.Error(err, "Shutdown")
			} else {
				final = resp.GetDomain()
			}
		}
		if final == nil || final.GetState() != stateShutoff {
			kctx, cancel := context.WithTimeout(st.ctx, 30*time.Second)
			resp, err := st.client.Kill(kctx, &rpc.Empty{})
			cancel()
			countRPC("Kill", err)
			if err != nil {
				logger.Error(err, "Kill")
				return
			}
			final = resp.GetDomain()
		}
		st.setDomain(final)
		logger.Info("The guest is off", "state", final.GetState(), "reason", final.GetReason(), "message", final.GetMessage())
	}()
}

// updateStatus applies the observation (nil: none; and the launcher's
// verification: refusal nil once verified) and extra (the migration's
// fields, LiveMigratable) to the VMI and writes the status if it
// changed; on a conflict it re-reads the VMI and recomputes, so the
// controller's fields written in between are kept.
func (c *Controller) updateStatus(ctx context.Context, vmi *v1.VirtualMachineInstance, o *Observation, refusal *launcherclient.UnverifiedError,
	extra func(*v1.VirtualMachineInstance, metav1.Time)) error {
	now := metav1.Now()
	if o != nil {
		now = o.Now
	}
	res, err := kubestatus.Update(ctx, c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace), vmi,
		func(vmi *v1.VirtualMachineInstance) {
			if vmi.Status.Phase.IsFinal() {
				return
			}
			if o != nil {
				ApplyStatus(vmi, *o)
				launcherCondition(vmi, refusal, o.Now)
			}
			if extra != nil {
				extra(vmi, now)
			}
		})
	statusWrites.WithLabelValues("conflict").Add(float64(res.Conflicts))
	switch {
	case err != nil:
		statusWrites.WithLabelValues("error").Inc()
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	case !res.Written:
		return nil
	}
	statusWrites.WithLabelValues("success").Inc()
	c.written.Record(vmi.Namespace+"/"+vmi.Name, res.Before.ResourceVersion)
	for _, e := range transitionEvents(res.Before, res.After) {
		c.cfg.Recorder.Event(res.After, e.typ, e.reason, e.msg)
	}
	if from, to := res.Before.Status.Phase, res.After.Status.Phase; from != to {
		klog.FromContext(ctx).Info("VMI phase changed", "from", from, "to", to, "reason", res.After.Status.Reason)
	} else {
		klog.FromContext(ctx).V(2).Info("VMI status updated")
	}
	return nil
}

// podReadyCondition is pod's Ready condition, nil without one (or without
// a Pod).
func podReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	if pod == nil {
		return nil
	}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return pod.Status.Conditions[i].DeepCopy()
		}
	}
	return nil
}
