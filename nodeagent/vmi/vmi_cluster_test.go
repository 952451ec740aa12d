//go:build cluster && qemu

package vmi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/devices/cgroup"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/launcherclient"
	"github.com/kemu-dev/kemu/test/cluster"
	"github.com/kemu-dev/kemu/test/testguest"
)

// One control plane (etcd + kube-apiserver, no kubelet) for the package:
// the tests play the VMI controller (status.nodeName, launcherPod,
// activePods) and the kubelet (the Pod's sockets volume under a fake
// kubelet root, the real kemu-launcher binary in it).
var env struct {
	c           *cluster.Cluster
	kube        kubernetes.Interface
	kemu        versioned.Interface
	launcherBin string
	repoRoot    string
	imageCache  string
	recorder    record.EventRecorder
	// cgroups holds the launcher Pods' cgroups (cgroup v2).
	cgroups string
}

const (
	testNode  = "node-1"
	finalizer = "kemu.dev/foregroundDeleteVirtualMachine"
	// Boots take 7–8 s under TCG here; the limits only catch hangs.
	bootTimeout = 2 * time.Minute
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	ctx := context.Background()
	klog.InitFlags(nil)
	_ = flag.Set("v", "2") // the node agent's domain changes and RPC outcomes
	flag.Parse()
	fail := func(what string, err error) int {
		fmt.Fprintln(os.Stderr, what+":", err)
		return 1
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		return fail("repo root", err)
	}
	env.repoRoot = root
	if _, err := testguest.Paths(); err != nil {
		return fail("test guest (make testguest)", err)
	}
	if _, err := os.Stat(filepath.Join(root, "_out/testguest/oci/containerdisk")); err != nil {
		return fail("test guest containerDisk (make testguest)", err)
	}
	tmp, err := os.MkdirTemp("", "kemu-nodeagent-test")
	if err != nil {
		return fail("temp dir", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o711); err != nil { // QEMU (uid 107) reads the image cache below it
		return fail("temp dir", err)
	}
	env.launcherBin = filepath.Join(tmp, "kemu-launcher")
	env.imageCache = filepath.Join(tmp, "images")
	build := exec.Command("go", "build", "-o", env.launcherBin, "./cmd/kemu-launcher")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fail("go build ./cmd/kemu-launcher", fmt.Errorf("%v\n%s", err, out))
	}
	c, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		return fail("starting the test cluster (make k8s)", err)
	}
	defer c.Stop()
	env.c = c
	if err := c.InstallCRDs(); err != nil {
		return fail("installing CRDs", err)
	}
	env.kube = kubernetes.NewForConfigOrDie(c.RESTConfig())
	env.kemu = versioned.NewForConfigOrDie(c.RESTConfig())
	rec, stopRec, err := NewRecorder(ctx, env.kube, testNode)
	if err != nil {
		return fail("event recorder", err)
	}
	defer stopRec()
	env.recorder = rec
	// Launchers run in cgroups named like kubelet Pod cgroups, their
	// sockets volumes are bind mounts: root, as under a kubelet.
	if os.Geteuid() != 0 {
		return fail("these tests", errors.New("need root (cgroups, bind mounts; make test runs as root)"))
	}
	h, err := cgroup.Self()
	if err != nil {
		return fail("cgroup2 hierarchy", err)
	}
	if env.cgroups, err = os.MkdirTemp(h.Dir, "kemu-nodeagent-test-"); err != nil {
		return fail("test cgroup", err)
	}
	defer func() {
		if err := removeCgroups(env.cgroups); err != nil {
			fmt.Fprintln(os.Stderr, "removing the test cgroups:", err)
		}
	}()
	return m.Run()
}

// agent is one node agent (VMI controller) run in the test process.
type agent struct {
	c      *Controller
	cancel context.CancelFunc
	done   chan error
}

func startAgent(t *testing.T, kubeletRoot string) *agent {
	t.Helper()
	c, err := New(Config{KubeClient: env.kube, KemuClient: env.kemu, NodeName: testNode, KubeletRoot: kubeletRoot, Recorder: env.recorder,
		SocketPoll: 200 * time.Millisecond, GuestInfoInterval: 10 * time.Second, AgentProbeInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- c.Run(ctx, 2) }()
	t.Cleanup(a.stop)
	return a
}

func (a *agent) stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.cancel = nil
	<-a.done
}

// vm is a VMI with its Pod object, the Pod's sockets volume under the
// test kubelet root and (once started) a real launcher process.
type vm struct {
	name        string
	vmi         *v1.VirtualMachineInstance
	podUID      types.UID
	kubeletRoot string
	short       string // a short directory: the launcher's runtime dir lives there
	sockets     string // the launcher's --sockets-dir (short path)
	cmd         *exec.Cmd
	exited      chan error
	log         *syncBuffer
}

// target is how the node agent reaches the VM's launcher.
func (v *vm) target() launcherclient.Target {
	return launcherclient.Target{KubeletRoot: v.kubeletRoot, PodUID: v.podUID, VMIUID: v.vmi.UID}
}

// hostSockets is the Pod's sockets volume as the node agent sees it.
func (v *vm) hostSockets() string { return launcherclient.SocketsDir(v.kubeletRoot, v.podUID) }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const vmiYAML = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: %s, namespace: default}
spec:
  terminationGracePeriodSeconds: 60
  domain:
    memory: {guest: 192Mi}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// startVM does what the controller and the kubelet would: the VMI (with
// the controller's finalizer), its launcher Pod bound to testNode, the
// VMI's status up to Scheduled (createVM), the Pod's sockets volume under
// kubeletRoot (mountSockets) and kemu-launcher --vmi-uid=<its UID> in the
// Pod's cgroup (startLauncher), waiting for Sync.
func startVM(t *testing.T, ctx context.Context, kubeletRoot, name string) *vm {
	t.Helper()
	v := createVM(t, ctx, kubeletRoot, name, nil)
	v.mountSockets(t)
	v.startLauncher(t, podCgroup(t, v.podUID), v.vmi.UID)
	return v
}

// createVM creates the VMI (with the controller's finalizer and
// annotations), its launcher Pod bound to testNode and the VMI's status up
// to Scheduled; all are deleted when the test ends.
func createVM(t *testing.T, ctx context.Context, kubeletRoot, name string, annotations map[string]string) *vm {
	t.Helper()
	var in v1.VirtualMachineInstance
	if err := yamlToJSON(fmt.Sprintf(vmiYAML, name), &in); err != nil {
		t.Fatal(err)
	}
	in.Finalizers = []string{finalizer}
	in.Annotations = annotations
	vmis := env.kemu.KemuV1alpha1().VirtualMachineInstances("default")
	created, err := vmis.Create(ctx, &in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-" + name, Namespace: "default", Labels: map[string]string{
			launcherpod.AppLabel: launcherpod.AppLauncher, launcherpod.CreatedByLabel: string(created.UID), launcherpod.VMINameLabel: name}},
		Spec: corev1.PodSpec{NodeName: testNode, Containers: []corev1.Container{{Name: "compute", Image: "kemu.local/launcher:test"}}},
	}
	pod, err = env.kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = vmis.Delete(context.Background(), name, metav1.DeleteOptions{})
		if cur, err := vmis.Get(context.Background(), name, metav1.GetOptions{}); err == nil && len(cur.Finalizers) > 0 {
			cur.Finalizers = nil
			_, _ = vmis.Update(context.Background(), cur, metav1.UpdateOptions{})
		}
		_ = env.kube.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	created.Status = v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled, NodeName: testNode, LauncherPod: pod.Name,
		ActivePods: map[types.UID]string{pod.UID: testNode},
		PhaseTransitionTimestamps: []v1.VirtualMachineInstancePhaseTransitionTimestamp{
			{Phase: v1.Pending, PhaseTransitionTimestamp: metav1.Now()}, {Phase: v1.Scheduling, PhaseTransitionTimestamp: metav1.Now()},
			{Phase: v1.Scheduled, PhaseTransitionTimestamp: metav1.Now()}}}
	created, err = vmis.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	short := testguest.TempDir(t, "kl") // QEMU (uid 107) must traverse it
	v := &vm{name: name, vmi: created, podUID: pod.UID, kubeletRoot: kubeletRoot, short: short, sockets: filepath.Join(short, "s")}
	if err := os.MkdirAll(v.sockets, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(v.hostSockets()), 0o750); err != nil {
		t.Fatal(err)
	}
	return v
}

// mountSockets makes the Pod's sockets volume as the kubelet does: a
// directory under the kubelet root with the launcher's short sockets
// directory bind-mounted on it (the host path is longer than a unix socket
// path may be, as under /var/lib/kubelet).
func (v *vm) mountSockets(t *testing.T) {
	t.Helper()
	host := v.hostSockets()
	if err := os.Mkdir(host, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(v.sockets, host, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting %s on %s: %v", v.sockets, host, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(host, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", host, err)
		}
	})
}

// startLauncher runs kemu-launcher --vmi-uid=vmiUID on the VM's sockets
// directory, started straight into cgroupDir (clone3 CLONE_INTO_CGROUP) as
// the container runtime would start it in its Pod's cgroup. It logs every
// RPC (-v 4).
func (v *vm) startLauncher(t *testing.T, cgroupDir string, vmiUID types.UID) {
	t.Helper()
	cg, err := unix.Open(cgroupDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cg)
	v.exited, v.log = make(chan error, 1), &syncBuffer{}
	v.cmd = exec.Command(env.launcherBin, "--sockets-dir", v.sockets, "--runtime-dir", filepath.Join(v.short, "run"),
		"--image-cache", env.imageCache, "--base-dir", env.repoRoot, "--accel", "tcg", "--pod-network=false",
		"--vmi-uid", string(vmiUID), "-v", "4")
	v.cmd.Stdout, v.cmd.Stderr = v.log, v.log
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: cg}
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { v.exited <- v.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-v.exited:
			v.exited <- err
		default:
			_ = syscall.Kill(-v.cmd.Process.Pid, syscall.SIGKILL)
			v.exited <- <-v.exited
		}
		if t.Failed() || os.Getenv("KEMU_TEST_LAUNCHER_LOG") != "" {
			t.Logf("launcher %s log (tail):\n%s", v.name, tail(v.log.String(), 40))
		}
	})
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		fi, err := os.Lstat(filepath.Join(v.sockets, launcherpod.Socket))
		return err == nil && fi.Mode()&os.ModeSocket != 0, nil
	})
	if err != nil {
		t.Fatalf("launcher %s never listened:\n%s", v.name, v.log.String())
	}
}

// podCgroup is a Pod's container cgroup as the kubelet's cgroupfs driver
// names it (kubepods/burstable/pod<uid>/<container>), under the tests'
// cgroup.
func podCgroup(t *testing.T, podUID types.UID) string {
	t.Helper()
	dir := filepath.Join(env.cgroups, "kubepods", "burstable", "pod"+string(podUID), "compute")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// removeCgroups removes a cgroup tree bottom up once its processes are
// gone.
func removeCgroups(base string) error {
	var dirs []string
	_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				return false, nil
			}
		}
		return true, nil
	})
}

// rpcs lists the command-server methods a launcher's log (-v 4) shows
// called, but for the Ping the launcher sends itself before it renames its
// socket (launcher/cmdserver's readiness check).
func (v *vm) rpcs() []string {
	var out []string
	for _, m := range rpcLine.FindAllStringSubmatch(v.log.String(), -1) {
		if m[1] != "Ping" {
			out = append(out, m[1])
		}
	}
	return out
}

var rpcLine = regexp.MustCompile(`"RPC(?: failed)?" method="/kemu\.launcher\.v1\.Launcher/(\w+)"`)

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func yamlToJSON(y string, out any) error {
	b, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// domain asks the launcher directly (verified, as the node agent would).
func (v *vm) domain(t *testing.T, ctx context.Context) *rpc.Domain {
	t.Helper()
	c, _, err := launcherclient.Dial(ctx, v.target())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.GetDomain(ctx, &rpc.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return d.GetDomain()
}

func condition(vmi *v1.VirtualMachineInstance, typ v1.VirtualMachineInstanceConditionType) *v1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == typ {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

func condIs(vmi *v1.VirtualMachineInstance, typ v1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus) bool {
	c := condition(vmi, typ)
	return c != nil && c.Status == status
}

// waitVMI polls the VMI until ok; it fails the test on timeout, showing
// the last status.
func waitVMI(t *testing.T, ctx context.Context, name, what string, timeout time.Duration, ok func(*v1.VirtualMachineInstance) bool) (*v1.VirtualMachineInstance, time.Duration) {
	t.Helper()
	start := time.Now()
	var last *v1.VirtualMachineInstance
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		vmi, err := env.kemu.KemuV1alpha1().VirtualMachineInstances("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = vmi
		return ok(vmi), nil
	})
	if err != nil {
		b, _ := json.MarshalIndent(last, "", "  ")
		t.Fatalf("%s: %s never happened (%v); last VMI:\n%s", name, what, err, b)
	}
	took := time.Since(start).Round(10 * time.Millisecond)
	t.Logf("%s: %s after %s", name, what, took)
	return last, took
}

func patchVMI(t *testing.T, ctx context.Context, name string, patch string) {
	t.Helper()
	if _, err := env.kemu.KemuV1alpha1().VirtualMachineInstances("default").Patch(ctx, name, types.MergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLifecycle runs one VM through the node agent: Running with its
// conditions (SoftwareEmulation, Synchronized, DevicesConfined, then
// AgentConnected with guestOSInfo), pause and unpause through the
// annotation, a node agent restart while the VM runs (same QEMU, not one
// VMI write, let alone a phase change), a soft reboot through the
// annotation (the guest resets, the done annotation is written), and
// deletion: ACPI shutdown, Succeeded, the launcher exits 0.
func TestLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	kubeletRoot := t.TempDir()
	a := startAgent(t, kubeletRoot)
	v := startVM(t, ctx, kubeletRoot, "life")

	vmi, _ := waitVMI(t, ctx, v.name, "Running", bootTimeout, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase == v1.Running && condIs(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionTrue)
	})
	if c := condition(vmi, v1.VirtualMachineInstanceSoftwareEmulation); c == nil || c.Status != corev1.ConditionTrue || c.Reason != ReasonTCG {
		t.Errorf("SoftwareEmulation %+v", c)
	}
	if c := condition(vmi, v1.VirtualMachineInstanceDevicesConfined); c == nil {
		t.Error("no DevicesConfined condition")
	} else {
		t.Logf("DevicesConfined %s %s: %s", c.Status, c.Reason, c.Message)
	}
	if vmi.Status.SelinuxContext == "" {
		t.Error("no selinuxContext")
	}
	if n := len(vmi.Status.PhaseTransitionTimestamps); n != 4 || vmi.Status.PhaseTransitionTimestamps[3].Phase != v1.Running {
		t.Errorf("phase transitions %+v", vmi.Status.PhaseTransitionTimestamps)
	}
	vmi, _ = waitVMI(t, ctx, v.name, "Synchronized with the QEMU version", 30*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		c := condition(vmi, v1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "QEMU ") && strings.Contains(c.Message, "accelerator tcg")
	})
	t.Logf("Synchronized: %s", condition(vmi, v1.VirtualMachineInstanceSynchronized).Message)
	vmi, _ = waitVMI(t, ctx, v.name, "AgentConnected with guestOSInfo", bootTimeout, func(vmi *v1.VirtualMachineInstance) bool {
		return condIs(vmi, v1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue) && vmi.Status.GuestOSInfo.ID != ""
	})
	t.Logf("guestOSInfo %+v, interfaces %+v", vmi.Status.GuestOSInfo, vmi.Status.Interfaces)

	// Pause and unpause through the annotation.
	patchVMI(t, ctx, v.name, `{"metadata":{"annotations":{"kemu.dev/paused":"true"}}}`)
	waitVMI(t, ctx, v.name, "Paused", 30*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		c := condition(vmi, v1.VirtualMachineInstancePaused)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == ReasonPausedByUser &&
			condIs(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionFalse) && vmi.Status.Phase == v1.Running
	})
	if d := v.domain(t, ctx); d.GetState() != rpc.DomainState_Paused {
		t.Errorf("launcher domain %v, want Paused", d)
	}
	patchVMI(t, ctx, v.name, `{"metadata":{"annotations":{"kemu.dev/paused":null}}}`)
	vmi, _ = waitVMI(t, ctx, v.name, "unpaused", 30*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		return condition(vmi, v1.VirtualMachineInstancePaused) == nil && condIs(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionTrue)
	})

	// Restart the node agent while the VM runs.
	before := v.domain(t, ctx)
	vmis := env.kemu.KemuV1alpha1().VirtualMachineInstances("default")
	w, err := vmis.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + v.name, ResourceVersion: vmi.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	restart := time.Now()
	a.stop()
	a2 := startAgent(t, kubeletRoot)
	// Wait until the new agent is connected and has seen the domain, then
	// a little longer for any write it would make.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		st := a2.c.entry("default/"+v.name, RoleSource)
		if st == nil {
			return false, nil
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.domain != nil && st.synced && (!st.domain.GetAgentConnected() || st.guest != nil), nil
	})
	if err != nil {
		t.Fatalf("the restarted node agent never caught up: %v", err)
	}
	t.Logf("restarted node agent resynced (Sync, domain, guest info) after %s", time.Since(restart).Round(10*time.Millisecond))
	time.Sleep(3 * time.Second)
	var events []string
drain:
	for {
		select {
		case ev := <-w.ResultChan():
			if obj, ok := ev.Object.(*v1.VirtualMachineInstance); ok {
				events = append(events, fmt.Sprintf("%s rv=%s phase=%s", ev.Type, obj.ResourceVersion, obj.Status.Phase))
				if obj.Status.Phase != v1.Running || ev.Type != watch.Modified {
					t.Errorf("phase flap during the restart: %s %s", ev.Type, obj.Status.Phase)
				}
			}
		default:
			break drain
		}
	}
	if len(events) > 0 {
		t.Errorf("the restarted node agent wrote the VMI %d times: %v", len(events), events)
	}
	after := v.domain(t, ctx)
	if after.GetQemuPid() != before.GetQemuPid() || after.GetStartedUnixNano() != before.GetStartedUnixNano() || after.GetState() != rpc.DomainState_Running {
		t.Errorf("the VM changed across the restart: before %v, after %v", before, after)
	}
	t.Logf("QEMU pid %d before and after the restart", after.GetQemuPid())

	// Soft reboot: acted on once (the SoftReboot RPC: guest agent when connected, else Ctrl+Alt+Delete), recorded
	// in the done annotation; the guest resets itself.
	patchVMI(t, ctx, v.name, `{"metadata":{"annotations":{"kemu.dev/soft-reboot":"r1"}}}`)
	vmi, _ = waitVMI(t, ctx, v.name, "soft reboot recorded", 30*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Annotations[v1.VMISoftRebootDoneAnnotation] == "r1"
	})
	if vmi.Status.Phase != v1.Running {
		t.Errorf("phase %s after a soft reboot", vmi.Status.Phase)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(v.log.String(), `event="RESET" data={"guest":true`), nil
	})
	if err != nil {
		t.Errorf("the guest did not reset after the soft reboot request")
	}

	// Deletion: ACPI shutdown, Succeeded.
	start := time.Now()
	if err := vmis.Delete(ctx, v.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi, _ = waitVMI(t, ctx, v.name, "Succeeded after deletion", 90*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase.IsFinal()
	})
	if vmi.Status.Phase != v1.Succeeded || vmi.Status.Reason != ReasonGuestShutdown {
		t.Errorf("after deletion: phase %s reason %q, want Succeeded GuestShutdown", vmi.Status.Phase, vmi.Status.Reason)
	}
	if c := condition(vmi, v1.VirtualMachineInstanceAgentConnected); c != nil {
		t.Errorf("AgentConnected %+v on a final VMI", c)
	}
	select {
	case err := <-v.exited:
		v.exited <- err
		if err != nil {
			t.Errorf("launcher exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the launcher did not exit after the guest powered off")
	}
	if !strings.Contains(v.log.String(), `event="POWERDOWN"`) {
		t.Error("no ACPI power button press in the launcher log")
	}
	t.Logf("deletion → Succeeded in %s", time.Since(start).Round(10*time.Millisecond))
	checkTransitionEvents(t, ctx, v.name)
	// The controller would drop its finalizer now that the Pod ends.
	patchVMI(t, ctx, v.name, `{"metadata":{"finalizers":null}}`)
}

// checkTransitionEvents: TestLifecycle's domain transitions each gave one
// event of the node agent (none again from the restarted one, none per
// resync), in order.
func checkTransitionEvents(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	once := []string{EventStarted, EventPaused, EventUnpaused, EventSoftRebooted, EventShutdown}
	for _, reason := range append(once, EventAgentConnected) {
		waitEvent(t, ctx, name, reason)
	}
	l, err := env.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",source=" + EventComponent})
	if err != nil {
		t.Fatal(err)
	}
	count, first := map[string]int32{}, map[string]time.Time{}
	var seen []string
	for _, e := range l.Items {
		count[e.Reason] += e.Count
		first[e.Reason] = e.FirstTimestamp.Time
		seen = append(seen, fmt.Sprintf("%s %s ×%d: %s", e.Type, e.Reason, e.Count, e.Message))
	}
	t.Logf("node agent events:\n%s", strings.Join(seen, "\n"))
	for i, reason := range once {
		if count[reason] != 1 {
			t.Errorf("%d %s events, want 1", count[reason], reason)
		}
		if i > 0 && first[reason].Before(first[once[i-1]]) {
			t.Errorf("%s (%s) before %s (%s)", reason, first[reason], once[i-1], first[once[i-1]])
		}
	}
}

// TestPodTerminating: a launcher Pod being deleted (the kubelet has not
// acted yet: there is none) makes the node agent shut the guest down
// with the VMI's grace period: ACPI, Succeeded.
func TestPodTerminating(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kubeletRoot := t.TempDir()
	startAgent(t, kubeletRoot)
	v := startVM(t, ctx, kubeletRoot, "podgone")
	vmi, _ := waitVMI(t, ctx, v.name, "AgentConnected", bootTimeout, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase == v1.Running && condIs(vmi, v1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue)
	})
	if err := env.kube.CoreV1().Pods("default").Delete(ctx, vmi.Status.LauncherPod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi, _ = waitVMI(t, ctx, v.name, "final after the Pod's deletion", 90*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase.IsFinal()
	})
	if vmi.Status.Phase != v1.Succeeded || vmi.Status.Reason != ReasonGuestShutdown {
		t.Errorf("phase %s reason %q, want Succeeded GuestShutdown", vmi.Status.Phase, vmi.Status.Reason)
	}
	if !strings.Contains(v.log.String(), `event="POWERDOWN"`) {
		t.Error("no ACPI power button press in the launcher log")
	}
}

// TestLauncherKilled: a launcher killed under a running VM (its QEMU dies
// with it) leaves a socket nobody answers on: the VMI fails, reason
// LauncherGone.
func TestLauncherKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kubeletRoot := t.TempDir()
	startAgent(t, kubeletRoot)
	v := startVM(t, ctx, kubeletRoot, "killed")
	waitVMI(t, ctx, v.name, "Running", bootTimeout, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase == v1.Running
	})
	pid := v.domain(t, ctx).GetQemuPid()
	if err := v.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	vmi, took := waitVMI(t, ctx, v.name, "Failed after the launcher was killed", 60*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase.IsFinal()
	})
	if vmi.Status.Phase != v1.Failed || vmi.Status.Reason != ReasonLauncherGone {
		t.Errorf("phase %s reason %q, want Failed %s", vmi.Status.Phase, vmi.Status.Reason, ReasonLauncherGone)
	}
	if c := condition(vmi, v1.VirtualMachineInstanceReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != ReasonLauncherGone {
		t.Errorf("Ready %+v", c)
	} else {
		t.Logf("Ready False %s: %s (%s)", c.Reason, c.Message, took)
	}
	// QEMU dies with its launcher (PR_SET_PDEATHSIG).
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return syscall.Kill(int(pid), 0) == syscall.ESRCH, nil
	})
	if err != nil {
		t.Errorf("QEMU %d outlived its launcher", pid)
	}
}

// TestLauncherVerification: launcher Pods that point the node agent at
// another VM's launcher (launcher.sock a symlink to its socket, the sockets
// volume a symlink to its directory), a launcher of another VMI, and a
// process of another Pod listening on a Pod's socket are refused: no
// command reaches anyone, the other VM is untouched, each VMI gets the
// LauncherUnverified condition and a Warning event, and the node agent
// keeps reconciling the other VMIs. A real launcher that later takes the
// place of a planted symlink is accepted.
func TestLauncherVerification(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	kubeletRoot := t.TempDir()
	startAgent(t, kubeletRoot)
	victim := startVM(t, ctx, kubeletRoot, "victim")
	waitVMI(t, ctx, victim.name, "Running", bootTimeout, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase == v1.Running && condIs(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionTrue)
	})
	before := victim.domain(t, ctx)
	victimSocket := launcherclient.SocketPath(kubeletRoot, victim.podUID)

	// launcher.sock is a symlink to the victim's socket; the VMI asks for
	// a pause, which would pause the victim if it got through.
	link := createVM(t, ctx, kubeletRoot, "hostile-link", map[string]string{v1.VMIPausedAnnotation: "true"})
	link.mountSockets(t)
	if err := os.Symlink(victimSocket, filepath.Join(link.sockets, launcherpod.Socket)); err != nil {
		t.Fatal(err)
	}
	// The whole sockets volume is a symlink to the victim's.
	dirLink := createVM(t, ctx, kubeletRoot, "hostile-dir", map[string]string{v1.VMIPausedAnnotation: "true"})
	if err := os.Symlink(victim.hostSockets(), dirLink.hostSockets()); err != nil {
		t.Fatal(err)
	}
	// The Pod's own launcher, started for the victim's VMI.
	wrongUID := createVM(t, ctx, kubeletRoot, "wrong-uid", nil)
	wrongUID.mountSockets(t)
	wrongUID.startLauncher(t, podCgroup(t, wrongUID.podUID), victim.vmi.UID)
	// A launcher process of the victim's Pod listening on another Pod's
	// socket.
	foreign := createVM(t, ctx, kubeletRoot, "foreign-peer", nil)
	foreign.mountSockets(t)
	foreign.startLauncher(t, podCgroup(t, victim.podUID), foreign.vmi.UID)

	for _, tc := range []struct {
		v      *vm
		reason string
	}{
		{link, launcherclient.ReasonSymlink},
		{dirLink, launcherclient.ReasonSymlink},
		{wrongUID, launcherclient.ReasonVMIUIDMismatch},
		{foreign, launcherclient.ReasonPeerOutsidePod},
	} {
		vmi, _ := waitVMI(t, ctx, tc.v.name, "LauncherUnverified "+tc.reason, 30*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
			c := condition(vmi, v1.VirtualMachineInstanceLauncherUnverified)
			return c != nil && c.Status == corev1.ConditionTrue && c.Reason == tc.reason
		})
		c := condition(vmi, v1.VirtualMachineInstanceLauncherUnverified)
		t.Logf("%s: LauncherUnverified %s: %s", tc.v.name, c.Reason, c.Message)
		if vmi.Status.Phase != v1.Scheduled {
			t.Errorf("%s: phase %s, want Scheduled (waiting for a launcher that verifies)", tc.v.name, vmi.Status.Phase)
		}
		if strings.Contains(c.Message, string(victim.vmi.UID)) || strings.Contains(c.Message, string(victim.podUID)) {
			t.Errorf("%s: the condition names the other VM: %s", tc.v.name, c.Message)
		}
		ev := waitEvent(t, ctx, tc.v.name, EventLauncherUnverified)
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, tc.reason) {
			t.Errorf("%s: event %s %q", tc.v.name, ev.Type, ev.Message)
		}
	}

	// Deleting a hostile VMI would send Shutdown (then Kill) to a launcher
	// it had connected to.
	vmis := env.kemu.KemuV1alpha1().VirtualMachineInstances("default")
	if err := vmis.Delete(ctx, dirLink.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each refused socket is looked at again (every 5 × 200 ms): let every
	// one be refused twice more, then the victim must be as it was.
	waitRefusals(t, ctx, 8)
	if d := victim.domain(t, ctx); d.GetState() != rpc.DomainState_Running || d.GetQemuPid() != before.GetQemuPid() {
		t.Errorf("the victim's domain changed: before %v, now %v", before, d)
	}
	for _, m := range victim.rpcs() {
		switch m {
		case "Pause", "Unpause", "Shutdown", "Kill", "Reset", "Qmp":
			t.Errorf("the victim's launcher got %s", m)
		}
	}
	if got := wrongUID.rpcs(); len(got) == 0 || slices.ContainsFunc(got, func(m string) bool { return m != "Info" }) {
		t.Errorf("the launcher of another VMI got %v, want only Info", got)
	}
	if got := foreign.rpcs(); len(got) > 0 {
		t.Errorf("the process outside the Pod got %v, want nothing", got)
	}
	if vmi, err := vmis.Get(ctx, victim.name, metav1.GetOptions{}); err != nil || vmi.Status.Phase != v1.Running ||
		condition(vmi, v1.VirtualMachineInstanceLauncherUnverified) != nil || condition(vmi, v1.VirtualMachineInstancePaused) != nil {
		t.Errorf("the victim's VMI changed: %v %+v", err, vmi.Status)
	}

	// The node agent goes on reconciling the victim: pause and unpause.
	patchVMI(t, ctx, victim.name, `{"metadata":{"annotations":{"kemu.dev/paused":"true"}}}`)
	waitVMI(t, ctx, victim.name, "Paused", 30*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		return condIs(vmi, v1.VirtualMachineInstancePaused, corev1.ConditionTrue)
	})
	patchVMI(t, ctx, victim.name, `{"metadata":{"annotations":{"kemu.dev/paused":null}}}`)
	waitVMI(t, ctx, victim.name, "unpaused", 30*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		return condition(vmi, v1.VirtualMachineInstancePaused) == nil && condIs(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionTrue)
	})

	// The Pod's real launcher replaces the planted symlink (it removes a
	// stale launcher.sock when it starts): accepted, the VM runs, and the
	// VMI's own pause request now reaches its own launcher.
	link.startLauncher(t, podCgroup(t, link.podUID), link.vmi.UID)
	vmi, _ := waitVMI(t, ctx, link.name, "Running once its own launcher answers", bootTimeout, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase == v1.Running && condition(vmi, v1.VirtualMachineInstanceLauncherUnverified) == nil &&
			condIs(vmi, v1.VirtualMachineInstancePaused, corev1.ConditionTrue)
	})
	if c := condition(vmi, v1.VirtualMachineInstanceReady); c == nil || c.Reason == ReasonLauncherUnverified {
		t.Errorf("Ready %+v", c)
	}
	if ev := waitEvent(t, ctx, link.name, EventLauncherVerified); ev.Type != corev1.EventTypeNormal {
		t.Errorf("event %+v", ev)
	}
	if d := victim.domain(t, ctx); d.GetState() != rpc.DomainState_Running || d.GetQemuPid() != before.GetQemuPid() {
		t.Errorf("the victim's domain changed: before %v, now %v", before, d)
	}
}

// TestLauncherReplacedWhileRunning: a tenant with a shell in its running
// launcher Pod replaces launcher.sock with a symlink to another VM's socket
// and kills its launcher, so that the node agent's connection breaks and
// would be re-established through the symlink. The node agent drops the
// connection instead: the VMI is Ready False LauncherUnverified and keeps
// its phase (its state is unknown, not over), and deleting it sends the
// other VM nothing.
func TestLauncherReplacedWhileRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubeletRoot := t.TempDir()
	startAgent(t, kubeletRoot)
	victim := startVM(t, ctx, kubeletRoot, "victim2")
	tenant := startVM(t, ctx, kubeletRoot, "tenant")
	for _, v := range []*vm{victim, tenant} {
		waitVMI(t, ctx, v.name, "Running", bootTimeout, func(vmi *v1.VirtualMachineInstance) bool {
			return vmi.Status.Phase == v1.Running && condIs(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionTrue)
		})
	}
	before := victim.domain(t, ctx)
	sock := filepath.Join(tenant.sockets, launcherpod.Socket)
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(launcherclient.SocketPath(kubeletRoot, victim.podUID), sock); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-tenant.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	vmi, _ := waitVMI(t, ctx, tenant.name, "LauncherUnverified", 30*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		c := condition(vmi, v1.VirtualMachineInstanceLauncherUnverified)
		return c != nil && c.Reason == launcherclient.ReasonSymlink
	})
	if c := condition(vmi, v1.VirtualMachineInstanceReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != ReasonLauncherUnverified {
		t.Errorf("Ready %+v, want False %s", c, ReasonLauncherUnverified)
	}
	if vmi.Status.Phase != v1.Running {
		t.Errorf("phase %s, want Running (kept: the VM's state is unknown, not over)", vmi.Status.Phase)
	}
	waitEvent(t, ctx, tenant.name, EventLauncherUnverified)

	// Deleting the tenant's VMI (Shutdown, then Kill, to a connected
	// launcher) and asking for a pause reach nobody.
	patchVMI(t, ctx, tenant.name, `{"metadata":{"annotations":{"kemu.dev/paused":"true"}}}`)
	if err := env.kemu.KemuV1alpha1().VirtualMachineInstances("default").Delete(ctx, tenant.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRefusals(t, ctx, 3)
	if d := victim.domain(t, ctx); d.GetState() != rpc.DomainState_Running || d.GetQemuPid() != before.GetQemuPid() {
		t.Errorf("the victim's domain changed: before %v, now %v", before, d)
	}
	for _, m := range victim.rpcs() {
		switch m {
		case "Pause", "Unpause", "Shutdown", "Kill", "Reset", "Qmp":
			t.Errorf("the victim's launcher got %s", m)
		}
	}
	waitVMI(t, ctx, victim.name, "still Running and Ready", 10*time.Second, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase == v1.Running && condIs(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionTrue) &&
			condition(vmi, v1.VirtualMachineInstancePaused) == nil
	})
}

// waitRefusals waits until the node agent has refused launchers n more
// times (kemu_nodeagent_launcher_connects_total{result="unverified"}).
func waitRefusals(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	count := func() float64 {
		mfs, err := Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "kemu_nodeagent_launcher_connects_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == "unverified" {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	start := count()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return count() >= start+float64(n), nil
	})
	if err != nil {
		t.Fatalf("the node agent did not refuse %d more launchers: %v", n, err)
	}
}

// waitEvent polls for an event of reason on the VMI.
func waitEvent(t *testing.T, ctx context.Context, name, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := env.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
		if err != nil || len(l.Items) == 0 {
			return false, nil
		}
		found = l.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: no %s event: %v", name, reason, err)
	}
	t.Logf("%s: event %s %s: %s", name, found.Type, found.Reason, found.Message)
	// The API server's kemu-nodeagent-events policy admits only events of
	// kemu-nodeagent on the agent's own node.
	if found.Source.Component != EventComponent || found.Source.Host != testNode || found.ReportingInstance != testNode {
		t.Errorf("%s: event source %+v, reporting instance %q; want %s on %s", name, found.Source, found.ReportingInstance,
			EventComponent, testNode)
	}
	return found
}

// addLauncherPod makes a second launcher Pod of v's VMI on testNode (as a
// migration's target on the same node will be), labelled as the
// controller labels it, with its sockets directory; it is deleted when the
// test ends. status.launcherPod and status.activePods still name v's Pod.
func addLauncherPod(t *testing.T, ctx context.Context, v *vm, podName string) *vm {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: "default", Labels: map[string]string{
			launcherpod.AppLabel: launcherpod.AppLauncher, launcherpod.CreatedByLabel: string(v.vmi.UID), launcherpod.VMINameLabel: v.name}},
		Spec: corev1.PodSpec{NodeName: testNode, Containers: []corev1.Container{{Name: "compute", Image: "kemu.local/launcher:test"}}},
	}
	pod, err := env.kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.kube.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	short := testguest.TempDir(t, "kl")
	w := &vm{name: podName, vmi: v.vmi, podUID: pod.UID, kubeletRoot: v.kubeletRoot, short: short, sockets: filepath.Join(short, "s")}
	if err := os.MkdirAll(w.sockets, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(w.hostSockets()), 0o750); err != nil {
		t.Fatal(err)
	}
	return w
}

// entries counts the node agent's entries of a VMI key.
func (a *agent) entries(key string) int {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	n := 0
	for _, st := range a.c.launchers {
		if st.key == key {
			n++
		}
	}
	return n
}

// TestTwoLaunchersOfOneVMI: a second launcher Pod of a running VMI on this
// node is an entry of its own, keyed by its Pod: the node agent connects to
// its launcher (verified) and follows its domain, but the VMI's status
// stays its source's — neither the second launcher's domain (paused) nor
// its loss reaches the VMI — and deleting the second Pod drops its entry
// without touching the VMI or sending either launcher a command.
func TestTwoLaunchersOfOneVMI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubeletRoot := t.TempDir()
	// The VM's launcher is up before the node agent starts: it finds it.
	v := startVM(t, ctx, kubeletRoot, "two")
	key := "default/" + v.name
	a := startAgent(t, kubeletRoot)
	vmi, _ := waitVMI(t, ctx, v.name, "Running with AgentConnected and guestOSInfo", bootTimeout, func(vmi *v1.VirtualMachineInstance) bool {
		return vmi.Status.Phase == v1.Running && condIs(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionTrue) &&
			condIs(vmi, v1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue) && vmi.Status.GuestOSInfo.ID != ""
	})
	// Every VMI write from here on is a failure.
	w, err := env.kemu.KemuV1alpha1().VirtualMachineInstances("default").Watch(ctx,
		metav1.ListOptions{FieldSelector: "metadata.name=" + v.name, ResourceVersion: vmi.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// The second launcher of the same VMI, started (by the test) paused:
	// its domain differs from the source's at once, and costs no CPU.
	second := addLauncherPod(t, ctx, v, "virt-launcher-two-second")
	second.mountSockets(t)
	second.startLauncher(t, podCgroup(t, second.podUID), v.vmi.UID)
	pausedVMI := v.vmi.DeepCopy()
	pausedVMI.Spec.StartStrategy = new(v1.StartStrategyPaused)
	b, err := vmiJSON(pausedVMI)
	if err != nil {
		t.Fatal(err)
	}
	client, _, err := launcherclient.Dial(ctx, second.target())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Sync(ctx, &rpc.SyncRequest{VmiJson: b}); err != nil {
		t.Fatalf("starting the second launcher paused: %v", err)
	}

	var other *launcherState
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		other = a.c.entry(key, RoleOther)
		return other != nil && other.getDomain().GetState() == rpc.DomainState_Paused && a.entries(key) == 2, nil
	})
	if err != nil {
		t.Fatalf("no entry of the second Pod with its paused domain: %v (%d entries)", err, a.entries(key))
	}
	source := a.c.entry(key, RoleSource)
	if source == nil {
		t.Fatal("no source entry")
	}
	// The entries' names as the workers keep them (under the controller's lock).
	a.c.mu.Lock()
	sourceName, otherName := source.podName, other.podName
	a.c.mu.Unlock()
	if source.podUID != v.podUID || other.podUID != second.podUID || otherName != "virt-launcher-two-second" {
		t.Fatalf("entries: source %s %s, other %s %s", source.podUID, sourceName, other.podUID, otherName)
	}
	if d := source.getDomain(); d.GetState() != rpc.DomainState_Running {
		t.Errorf("the source's domain %v", d)
	}
	t.Logf("two entries: source Pod %s (%s), other Pod %s (%s, %s)", sourceName, source.getDomain().GetState(),
		otherName, other.getDomain().GetState(), other.getDomain().GetReason())

	// The second launcher dies: its entry sees it gone; the VMI does not
	// fail (LauncherGone is the source's to report).
	if err := syscall.Kill(-second.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return other.isGone(), nil
	})
	if err != nil {
		t.Fatalf("the second launcher's entry never saw it gone: %v", err)
	}
	// Its Pod is deleted: the entry goes, the source's stays.
	if err := env.kube.CoreV1().Pods("default").Delete(ctx, "virt-launcher-two-second", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return a.c.entry(key, RoleOther) == nil && a.entries(key) == 1, nil
	})
	if err != nil {
		t.Fatalf("the deleted Pod's entry is still there: %v", err)
	}
	if a.c.entry(key, RoleSource) != source {
		t.Error("the source's entry was replaced")
	}

	// Nothing was written to the VMI meanwhile (nor in the next seconds,
	// which a write triggered by the deletion would fall into), and the
	// source's launcher got no command.
	select {
	case ev := <-w.ResultChan():
		obj, _ := ev.Object.(*v1.VirtualMachineInstance)
		b, _ := json.MarshalIndent(obj, "", "  ")
		t.Errorf("the VMI was written: %s\n%s", ev.Type, b)
	case <-time.After(3 * time.Second):
	}
	for _, m := range v.rpcs() {
		switch m {
		case "Pause", "Unpause", "Shutdown", "Kill", "Reset", "SoftReboot", "Qmp":
			t.Errorf("the source's launcher got %s", m)
		}
	}
	if got := second.rpcs(); slices.ContainsFunc(got, func(m string) bool { return m != "Info" && m != "WatchDomain" && m != "Sync" }) {
		t.Errorf("the second launcher got %v; want only Info, WatchDomain and the test's Sync", got)
	}
	if d := v.domain(t, ctx); d.GetState() != rpc.DomainState_Running {
		t.Errorf("the source's domain %v", d)
	}
}
