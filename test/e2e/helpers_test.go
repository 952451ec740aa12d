//go:build cluster && qemu

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/testguest"
)

// kubectl runs kubectl against the cluster and fails the test on an error.
func (ev *env) kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, stderr, err := ev.c.Kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// apply is `kubectl apply -f -` of a manifest.
func (ev *env) apply(t testing.TB, manifest string) {
	t.Helper()
	if out, stderr, err := ev.c.KubectlInput(manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s%s\n%s", err, out, stderr, manifest)
	}
}

// run runs kemuctl with the cluster's kubeconfig.
func (ev *env) run(ctx context.Context, t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, ev.kemuctl, append(args, "--kubeconfig", ev.c.Kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("kemuctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	t.Logf("kemuctl %s (%s)", strings.Join(args, " "), time.Since(t0).Round(time.Millisecond))
	return stdout.String()
}

// vmiOptions are the knobs of vmiManifest.
type vmiOptions struct {
	name      string
	kind      string // VirtualMachineInstance, or VirtualMachine (spec.template)
	userData  string
	ports     []int
	labels    map[string]string
	kernel    bool // kernel boot from the kernelboot image instead of the containerDisk
	memory    string
	grace     int
	noNetwork bool
	node      string // pinned to this node (spec.nodeSelector kubernetes.io/hostname)
	// evictionStrategy is spec.evictionStrategy ("" = none set).
	evictionStrategy string
	// bridge binds the pod network with bridge instead of masquerade.
	bridge bool
	// passt binds the pod network with passtBinding instead of masquerade.
	passt bool
	// multus adds a second interface and network of this name, a Multus
	// network (networkName the same name) with the bridge binding.
	multus string
	// multusDefault makes the multus network the VMI's only one, in place
	// of the pod network (multus.default: true, bridge binding).
	multusDefault bool
	// emptyDisk adds a 64Mi emptyDisk with this serial.
	emptyDisk string
	// cpuRequest is spec.domain.resources.requests.cpu ("" = the default).
	cpuRequest string
	// extraSpec is YAML appended to the spec (probes, ...), at spec level.
	extraSpec string
	// runStrategy is a VirtualMachine's ("" = Always).
	runStrategy string
}

// vmiManifest renders a VMI (or a VM, runStrategy Always by default) of the test
// guest: a containerDisk with imagePullPolicy IfNotPresent (or a kernel
// boot), cloud-init NoCloud, the pod network through masquerade.
func vmiManifest(o vmiOptions) string {
	if o.memory == "" {
		o.memory = "128Mi"
	}
	if o.grace == 0 {
		o.grace = 30
	}
	var spec strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&spec, format+"\n", args...) }
	w("terminationGracePeriodSeconds: %d", o.grace)
	if o.evictionStrategy != "" {
		w("evictionStrategy: %s", o.evictionStrategy)
	}
	if o.node != "" {
		w("nodeSelector: {kubernetes.io/hostname: %s}", o.node)
	}
	w("domain:")
	w("  memory: {guest: %s}", o.memory)
	if o.cpuRequest != "" {
		w("  resources: {requests: {cpu: %s}}", o.cpuRequest)
	}
	if o.kernel {
		w("  firmware:")
		w("    kernelBoot:")
		w("      kernelArgs: console=ttyS0")
		w("      container:")
		w("        image: %s", kernelBootImage)
		w("        imagePullPolicy: IfNotPresent")
		w("        kernelPath: /boot/vmlinuz")
		w("        initrdPath: /boot/initrd.img")
	}
	if o.kernel && o.userData == "" && o.noNetwork {
		w("  devices: {}")
	} else {
		w("  devices:")
	}
	if !o.kernel || o.userData != "" {
		w("    disks:")
		if !o.kernel {
			w("    - {name: root, disk: {bus: virtio}}")
		}
		if o.userData != "" {
			w("    - {name: cloudinit, disk: {bus: virtio}}")
		}
		if o.emptyDisk != "" {
			w("    - {name: scratch, serial: %s, disk: {bus: virtio}}", o.emptyDisk)
		}
	}
	if !o.noNetwork {
		w("    interfaces:")
		w("    - name: default")
		switch {
		case o.bridge, o.multusDefault:
			w("      bridge: {}")
		case o.passt:
			w("      passtBinding: {}")
		default:
			w("      masquerade: {}")
		}
		if len(o.ports) > 0 {
			w("      ports:")
			for _, p := range o.ports {
				w("      - {port: %d}", p)
			}
		}
		if o.multus != "" && !o.multusDefault {
			w("    - {name: %s, bridge: {}}", o.multus)
		}
		w("networks:")
		switch {
		case o.multusDefault:
			// namespace/name: Multus looks a bare default network's name
			// up in its own namespace (kube-system), as for KubeVirt.
			w("- {name: default, multus: {networkName: %s/%s, default: true}}", ns, o.multus)
		case o.multus != "":
			w("- {name: default, pod: {}}")
			w("- {name: %s, multus: {networkName: %s}}", o.multus, o.multus)
		default:
			w("- {name: default, pod: {}}")
		}
	}
	if !o.kernel || o.userData != "" {
		w("volumes:")
		if !o.kernel {
			w("- name: root")
			w("  containerDisk: {image: %s, imagePullPolicy: IfNotPresent}", containerDiskImage)
		}
		if o.emptyDisk != "" {
			w("- {name: scratch, emptyDisk: {capacity: 64Mi}}")
		}
		if o.userData != "" {
			w("- name: cloudinit")
			w("  cloudInitNoCloud:")
			w("    userData: |")
			for _, l := range strings.Split(strings.TrimRight(o.userData, "\n"), "\n") {
				w("      %s", l)
			}
		}
	}
	if o.extraSpec != "" {
		spec.WriteString(strings.TrimRight(o.extraSpec, "\n") + "\n")
	}
	var labels []string
	for k, v := range o.labels {
		labels = append(labels, fmt.Sprintf("%s: %q", k, v))
	}
	meta := "{labels: {" + strings.Join(labels, ", ") + "}}"
	if o.kind == "VirtualMachine" {
		if o.runStrategy == "" {
			o.runStrategy = "Always"
		}
		return fmt.Sprintf(`apiVersion: kemu.dev/v1alpha1
kind: VirtualMachine
metadata: {name: %s, namespace: %s}
spec:
  runStrategy: %s
  template:
    metadata: %s
    spec:
%s`, o.name, ns, o.runStrategy, meta, indent(spec.String(), "      "))
	}
	return fmt.Sprintf(`apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: %s, namespace: %s, labels: {%s}}
spec:
%s`, o.name, ns, strings.Join(labels, ", "), indent(spec.String(), "  "))
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}

// getVMI reads a VMI (nil when not found).
func (ev *env) getVMI(ctx context.Context, name string) (*v1.VirtualMachineInstance, error) {
	vmi, err := ev.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return vmi, err
}

// waitRunning polls until the VMI is Running (failing at once when it ends)
// and returns it.
func (ev *env) waitRunning(ctx context.Context, t testing.TB, name string, timeout time.Duration) *v1.VirtualMachineInstance {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var got *v1.VirtualMachineInstance
	var final error
	err := poll(ctx, 250*time.Millisecond, func() error {
		vmi, err := ev.getVMI(ctx, name)
		if err != nil {
			return err
		}
		if vmi == nil {
			return fmt.Errorf("VMI %s not found", name)
		}
		if vmi.Status.Phase == v1.Running {
			got = vmi
			return nil
		}
		if vmi.Status.Phase.IsFinal() {
			final = fmt.Errorf("VMI %s ended %s (%s): %+v", name, vmi.Status.Phase, vmi.Status.Reason, vmi.Status.Conditions)
			return nil
		}
		return fmt.Errorf("VMI %s phase %q, conditions %+v", name, vmi.Status.Phase, vmi.Status.Conditions)
	})
	if err == nil {
		err = final
	}
	if err != nil {
		t.Fatalf("waiting for VMI %s Running: %v", name, err)
	}
	return got
}

// waitCondition polls until the VMI's condition has the status.
func (ev *env) waitCondition(ctx context.Context, t testing.TB, name string, ct v1.VirtualMachineInstanceConditionType, want corev1.ConditionStatus, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := poll(ctx, 250*time.Millisecond, func() error {
		vmi, err := ev.getVMI(ctx, name)
		if err != nil || vmi == nil {
			return fmt.Errorf("VMI %s: %v", name, err)
		}
		got := corev1.ConditionStatus("absent")
		for _, c := range vmi.Status.Conditions {
			if c.Type == ct {
				got = c.Status
			}
		}
		if got != want {
			return fmt.Errorf("condition %s is %s, want %s", ct, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("VMI %s: %v", name, err)
	}
}

func condition(vmi *v1.VirtualMachineInstance, ct v1.VirtualMachineInstanceConditionType) *v1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == ct {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

// deleteVMI deletes a VMI and waits until it and its Pods are gone.
func (ev *env) deleteVMI(ctx context.Context, t testing.TB, name string) {
	t.Helper()
	ev.kubectl(t, "-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m")
	ev.waitPodsGone(ctx, t, "kemu.dev/vmi-name="+name)
}

// waitPodsGone polls until no Pod matches the selector.
func (ev *env) waitPodsGone(ctx context.Context, t testing.TB, selector string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := poll(ctx, 500*time.Millisecond, func() error {
		pods, err := ev.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d Pods left with %s (%s %s)", len(pods.Items), selector, pods.Items[0].Name, pods.Items[0].Status.Phase)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// phaseEvent is one VMI change a phaseWatch saw.
type phaseEvent struct {
	at     time.Time
	typ    watch.EventType
	name   string
	uid    string
	phase  v1.VirtualMachineInstancePhase
	reason string // status.reason
}

// phaseWatch records every change of the namespace's VMIs from now on.
type phaseWatch struct {
	mu     sync.Mutex
	events []phaseEvent
	notify chan struct{}
	stop   func()
	done   chan struct{}
}

func (ev *env) watchPhases(ctx context.Context, t testing.TB, selector string) *phaseWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w, err := ev.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	pw := &phaseWatch{notify: make(chan struct{}, 1), done: make(chan struct{})}
	pw.stop = func() { cancel(); w.Stop(); <-pw.done }
	t.Cleanup(pw.stop)
	go func() {
		defer close(pw.done)
		for ev := range w.ResultChan() {
			vmi, ok := ev.Object.(*v1.VirtualMachineInstance)
			if !ok {
				continue
			}
			pw.mu.Lock()
			pw.events = append(pw.events, phaseEvent{time.Now(), ev.Type, vmi.Name, string(vmi.UID), vmi.Status.Phase, vmi.Status.Reason})
			pw.mu.Unlock()
			select {
			case pw.notify <- struct{}{}:
			default:
			}
		}
	}()
	return pw
}

func (pw *phaseWatch) snapshot() []phaseEvent {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return append([]phaseEvent(nil), pw.events...)
}

// waitFor waits until an event satisfies f and returns it.
func (pw *phaseWatch) waitFor(ctx context.Context, f func(phaseEvent) bool) (phaseEvent, error) {
	for {
		for _, e := range pw.snapshot() {
			if f(e) {
				return e, nil
			}
		}
		select {
		case <-ctx.Done():
			return phaseEvent{}, fmt.Errorf("%w; seen: %v", ctx.Err(), pw.summary())
		case <-pw.notify:
		case <-pw.done:
			return phaseEvent{}, fmt.Errorf("watch ended; seen: %v", pw.summary())
		}
	}
}

func (pw *phaseWatch) summary() string {
	var b strings.Builder
	for _, e := range pw.snapshot() {
		fmt.Fprintf(&b, "%s %s %s(%.8s) %s; ", e.at.Format("15:04:05.000"), e.typ, e.name, e.uid, e.phase)
	}
	return b.String()
}

// qemuPids are the host pids of the QEMU processes of VMI ns/name
// (QEMU's -name guest=<ns>_<vmi>; pids inside the Pod differ).
func qemuPids(name string) []int {
	out, _ := exec.Command("pgrep", "-f", fmt.Sprintf(`guest=%s_%s([, ]|$)`, ns, regexp.QuoteMeta(name))).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			if cmd, _ := os.ReadFile(filepath.Join("/proc", f, "cmdline")); bytes.Contains(cmd, []byte("qemu-system")) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// qemuPid waits for exactly one QEMU of the VMI and returns its host pid.
func qemuPid(ctx context.Context, t testing.TB, name string) int {
	t.Helper()
	var pid int
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := poll(ctx, 200*time.Millisecond, func() error {
		p := qemuPids(name)
		if len(p) != 1 {
			return fmt.Errorf("QEMU processes of %s/%s: %v", ns, name, p)
		}
		pid = p[0]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// ppid is a process's parent.
func ppid(pid int) (int, string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	// pid (comm) state ppid ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	p, err := strconv.Atoi(f[1])
	comm := s[strings.IndexByte(s, '(')+1 : i]
	return p, comm, err
}

// launcherPid is the host pid of the kemu-launcher process of the Pod:
// the process named kemu-launcher whose cgroup is the Pod's (cgroupfs
// driver: .../pod<uid>/<container>).
func launcherPid(podUID string) (int, error) { return podProcess(podUID, "kemu-launcher") }

// podProcess is the host pid of the one process named comm in the Pod.
func podProcess(podUID, comm string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var found []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if c, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); strings.TrimSpace(string(c)) != comm {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if bytes.Contains(cg, []byte("pod"+podUID)) || bytes.Contains(cg, []byte("pod"+strings.ReplaceAll(podUID, "-", "_"))) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("%s processes of Pod %s: %v", comm, podUID, found)
	}
	return found[0], nil
}

// ancestors lists pid's parents up to init, "pid(comm)".
func ancestors(pid int) []string {
	var out []string
	for pid > 1 {
		p, comm, err := ppid(pid)
		if err != nil {
			break
		}
		out = append(out, fmt.Sprintf("%d(%s)", pid, comm))
		pid = p
	}
	return out
}

// console is a running `kemuctl console VMI`.
type console struct {
	cmd   *exec.Cmd
	out   testguest.SyncBuffer
	stdin io.WriteCloser
	done  chan error
	once  sync.Once
}

func (ev *env) startConsole(t testing.TB, name string) *console {
	t.Helper()
	return ev.startConsoleWith(t, name, "-n", ns, "--kubeconfig", ev.c.Kubeconfig)
}

// startConsoleAs is startConsole as user u.
func (ev *env) startConsoleAs(t testing.TB, name string, u user) *console {
	t.Helper()
	return ev.startConsoleWith(t, name, u.flags...)
}

func (ev *env) startConsoleWith(t testing.TB, name string, flags ...string) *console {
	t.Helper()
	c := &console{done: make(chan error, 1)}
	c.cmd = exec.Command(ev.kemuctl, append([]string{"console", name}, flags...)...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	var err error
	// An open stdin that never sends: the console keeps streaming.
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(c.stop)
	return c
}

func (c *console) stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Kill() // an error when it already ended
		_ = c.stdin.Close()
	})
}

// waitFor polls the console output for a string.
func (c *console) waitFor(ctx context.Context, s string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return poll(ctx, 200*time.Millisecond, func() error {
		if strings.Contains(c.out.String(), s) {
			return nil
		}
		select {
		case err := <-c.done:
			c.done <- err
			return fmt.Errorf("kemuctl console ended (%v) without %q; output:\n%s", err, s, tail(c.out.String(), 2000))
		default:
		}
		return fmt.Errorf("no %q on the console yet", s)
	})
}

// runInShell types cmd into the console (a shell there: the guest's user
// data started it, maybe not yet) every few seconds until want shows, for
// at most timeout. The typed text is echoed; want must be what only the
// command's output contains.
func (c *console) runInShell(ctx context.Context, cmd, want string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := time.Time{}
	return poll(ctx, 200*time.Millisecond, func() error {
		if strings.Contains(c.out.String(), want) {
			return nil
		}
		select {
		case err := <-c.done:
			c.done <- err
			return fmt.Errorf("kemuctl console ended (%v) without %q; output:\n%s", err, want, tail(c.out.String(), 2000))
		default:
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			if _, err := c.stdin.Write([]byte(cmd + "\n")); err != nil {
				return err
			}
		}
		return fmt.Errorf("no %q on the console yet; output:\n%s", want, tail(c.out.String(), 500))
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// nodeAgentPod is the Ready node agent Pod on node.
func (ev *env) nodeAgentPod(ctx context.Context, node string) (*corev1.Pod, error) {
	pods, err := ev.kube.CoreV1().Pods(kemuNS).List(ctx, metav1.ListOptions{LabelSelector: nodeagentSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	for i, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return &pods.Items[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no Ready node agent Pod on %s", node)
}

// nodeAgentScrape reads the node agent's /metrics on node (its health
// port, through its Pod IP).
func (ev *env) nodeAgentScrape(ctx context.Context, node string) ([]byte, error) {
	p, err := ev.nodeAgentPod(ctx, node)
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, nodeAgentHealthPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	return b, err
}

// nodeAgentMetric reads one unlabelled metric of the node agent on node.
func (ev *env) nodeAgentMetric(ctx context.Context, node, name string) (string, error) {
	b, err := ev.nodeAgentScrape(ctx, node)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("node agent on %s: no %s", node, name)
	}
	return string(m[1]), nil
}

// launcherConnections waits until the node agent on node has want launcher
// connections (kemu_nodeagent_launcher_connections).
func (ev *env) launcherConnections(ctx context.Context, node string, want int) error {
	return poll(ctx, 500*time.Millisecond, func() error {
		got, err := ev.nodeAgentMetric(ctx, node, "kemu_nodeagent_launcher_connections")
		if err == nil && got != fmt.Sprint(want) {
			err = fmt.Errorf("node agent on %s: kemu_nodeagent_launcher_connections %s, want %d", node, got, want)
		}
		return err
	})
}

// nodeAgentHealthPort is deploy/'s node agent --health-addr port.
const nodeAgentHealthPort = 8185

// readyMarker is the test guest's ready marker (cpus, mem_kb …), read on
// a fresh connection to the VMI's serial console until it shows.
func (ev *env) readyMarker(ctx context.Context, t testing.TB, name string) testguest.Marker {
	t.Helper()
	con := ev.startConsole(t, name)
	if err := con.waitFor(ctx, "KEMU-GUEST ready", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	con.stop()
	var ready testguest.Marker
	for _, line := range strings.Split(con.out.String(), "\n") {
		if m, ok := testguest.ParseMarker(line); ok && m.Kind == testguest.KindReady {
			ready = m
		}
	}
	return ready
}
