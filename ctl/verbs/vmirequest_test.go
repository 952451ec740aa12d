package verbs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned/fake"
	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/cli/clitest"
	"github.com/kemu-dev/kemu/ctl/shell"
)

// The exact commands run in the launcher Pod.
func TestRemoteArgv(t *testing.T) {
	const sock = "/var/run/kemu/sockets/launcher.sock"
	if RemoteSocket != sock {
		t.Fatalf("remote socket %q, want %q", RemoteSocket, sock)
	}
	for _, tc := range []struct {
		name string
		got  []string
		want []string
	}{
		{"shell interactive", remoteShellArgv("", false, false, false), []string{"/usr/bin/kemuctl", "shell", "--socket", sock}},
		{"shell -c", remoteShellArgv("status; stats", true, false, false), []string{"/usr/bin/kemuctl", "shell", "--socket", sock, "-c", "status; stats"}},
		{"shell -c ''", remoteShellArgv("", true, false, false), []string{"/usr/bin/kemuctl", "shell", "--socket", sock, "-c", ""}},
		{"shell -o json", remoteShellArgv(`qmp query-status {"a": 1}`, true, true, false),
			[]string{"/usr/bin/kemuctl", "shell", "--socket", sock, "-c", `qmp query-status {"a": 1}`, "-o", "json"}},
		{"shell interactive json", remoteShellArgv("", false, true, false), []string{"/usr/bin/kemuctl", "shell", "--socket", sock, "-o", "json"}},
		{"shell -c events, stdin held open", remoteShellArgv("events", true, false, true), []string{"/usr/bin/kemuctl", "shell", "--socket", sock, "-c", "events", "--eof-hangup"}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// Usage errors exit 2, a cluster that cannot be reached 1, before any
// request.
func TestVMICommandArguments(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "kubeconfig")
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"pause"}, 2, "accepts 1 arg(s), received 0"},
		{[]string{"unpause", "a", "b"}, 2, "accepts 1 arg(s), received 2"},
		{[]string{"soft-reboot", "a", "--timeout", "soon"}, 2, `invalid argument "soon" for "--timeout"`},
		{[]string{"pause", "a", "--timeout", "0s"}, 2, "kemuctl pause: --timeout 0s: want a positive duration"},
		{[]string{"pause", "a", "--wait=maybe"}, 2, `invalid argument "maybe" for "--wait"`},
		{[]string{"pause", "a", "--kubeconfig", missing}, 1, "kemuctl pause: kubeconfig: "},
		{[]string{"unpause", "a", "-n", "x", "--kubeconfig", missing, "--wait=false"}, 1, "kemuctl unpause: kubeconfig: "},
		{[]string{"console"}, 2, "accepts 1 arg(s), received 0"},
		{[]string{"console", "a", "--kubeconfig", missing}, 1, "kemuctl console: kubeconfig: "},
		{[]string{"shell", "a", "-n", "x", "-c", "status", "--kubeconfig", missing}, 1, "kemuctl shell: kubeconfig: "},
		{[]string{"vnc"}, 2, "accepts 1 arg(s), received 0"},
		{[]string{"vnc", "a", "--port", "65536"}, 2, "kemuctl vnc: --port 65536: want 0 (a free port) to 65535"},
		{[]string{"vnc", "a", "--kubeconfig", missing}, 1, "kemuctl vnc: kubeconfig: "},
		{[]string{"start", "a", "--kubeconfig", missing}, 1, "kemuctl start: kubeconfig: "},
		{[]string{"migrate", "a", "--kubeconfig", missing}, 1, "kemuctl migrate: kubeconfig: "},
		{[]string{"shell", "a", "--socket", "/s"}, 2, "either --socket PATH or a VMI name"},
		{[]string{"shell", "a", "-o", "yaml"}, 2, `-o "yaml"`},
		{[]string{"shell", "a", "b"}, 2, "accepts at most 1 arg(s), received 2"},
	} {
		stdout, stderr, code := run(t, "", tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("kemuctl %s: exit %d (want %d), stderr %q (want %q), stdout %q",
				strings.Join(tc.args, " "), code, tc.code, stderr, tc.stderr, stdout)
		}
	}
}

func testVMI(phase v1.VirtualMachineInstancePhase, annotations map[string]string, conds ...v1.VirtualMachineInstanceCondition) *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-1", Annotations: annotations},
		Status:     v1.VirtualMachineInstanceStatus{Phase: phase, Conditions: conds, NodeName: "node1"},
	}
}

var (
	pausedTrue  = v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue, Reason: "PausedByUser"}
	pausedFalse = v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionFalse, Reason: "Failed", Message: "QEMU said no"}
)

// When each request is done (kemu-api's plans, what it refuses and the
// annotations it merges, are tested in apiserver/subresource).
func TestVMIRequestDone(t *testing.T) {
	const value = "2024-05-06T07:08:09.000000123Z"
	for _, tc := range []struct {
		name     string
		test     func(*v1.VirtualMachineInstance) (vmiDoneFunc, error)
		accepted *v1.VirtualMachineInstance // as read after kemu-api accepted it
		err      string
		doneFor  []*v1.VirtualMachineInstance // done for these
		notFor   []*v1.VirtualMachineInstance // and not for these
	}{
		{name: "pause", test: pauseDone, accepted: testVMI(v1.Running, map[string]string{"kemu.dev/paused": "true"}),
			doneFor: []*v1.VirtualMachineInstance{testVMI(v1.Running, nil, pausedTrue)},
			notFor:  []*v1.VirtualMachineInstance{testVMI(v1.Running, nil), testVMI(v1.Running, nil, pausedFalse)}},
		{name: "unpause", test: unpauseDone, accepted: testVMI(v1.Running, nil, pausedTrue),
			doneFor: []*v1.VirtualMachineInstance{testVMI(v1.Running, nil), testVMI(v1.Running, nil, pausedFalse)},
			notFor:  []*v1.VirtualMachineInstance{testVMI(v1.Running, nil, pausedTrue)}},
		{name: "soft-reboot", test: softRebootDone, accepted: testVMI(v1.Running, map[string]string{"kemu.dev/soft-reboot": value}),
			doneFor: []*v1.VirtualMachineInstance{testVMI(v1.Running, map[string]string{"kemu.dev/soft-reboot-done": value})},
			notFor: []*v1.VirtualMachineInstance{testVMI(v1.Running, nil),
				testVMI(v1.Running, map[string]string{"kemu.dev/soft-reboot-done": "2024-05-06T07:00:00Z"})}},
		{name: "soft-reboot without the request", test: softRebootDone, accepted: testVMI(v1.Running, nil),
			err: "no kemu.dev/soft-reboot annotation after kemu-api accepted the soft reboot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, err := tc.test(tc.accepted)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.doneFor {
				if ok, _ := done(v); !ok {
					t.Errorf("not done for %v %v", v.Annotations, v.Status.Conditions)
				}
			}
			for _, v := range tc.notFor {
				if ok, _ := done(v); ok {
					t.Errorf("done for %v %v", v.Annotations, v.Status.Conditions)
				}
			}
		})
	}
}

// fakeAPI stands in for kemu-api in unit tests: it records the PUTs and
// answers each with err (and applies annotate to the fake clientset's VMI
// on success, as kemu-api's request would).
type fakeAPI struct {
	puts     []string
	err      error
	annotate func()
}

func (f *fakeAPI) Put(_ context.Context, verb subresources.Verb, ns, name string, _ any) ([]byte, error) {
	f.puts = append(f.puts, verb.Path(ns, name))
	if f.err == nil && f.annotate != nil {
		f.annotate()
	}
	return nil, f.err
}

// The request against a fake kemu-api and clientset: the PUT sent, the
// wait and its errors.
func TestVMIRequestRun(t *testing.T) {
	ctx := context.Background()
	pause := vmiRequest{verb: "pause", sub: subresources.Pause, pending: "pause", done: "paused", doneFor: pauseDone}
	unpause := vmiRequest{verb: "unpause", sub: subresources.Unpause, pending: "unpause", done: "unpaused", doneFor: unpauseDone}

	cs := fake.NewSimpleClientset()
	api := &fakeAPI{err: apierrors.NewNotFound(schema.GroupResource{Group: "kemu.dev", Resource: "virtualmachineinstances"}, "a")}
	if _, err := pause.run(ctx, api, cs, "ns", "a", true, time.Second); err == nil || err.Error() != "VMI ns/a not found" {
		t.Errorf("missing VMI: %v", err)
	}

	// No node agent: the request is accepted, the wait times out naming
	// the VMI, the condition and the node.
	cs = fake.NewSimpleClientset(testVMI(v1.Running, nil))
	api = &fakeAPI{}
	t0 := time.Now()
	_, err := pause.run(ctx, api, cs, "ns", "a", true, 600*time.Millisecond)
	want := "timed out after 600ms waiting for VMI ns/a to be paused (no Paused condition); is the kemu node agent on node node1 running?"
	if err == nil || err.Error() != want {
		t.Errorf("timeout: %v, want %q", err, want)
	}
	if d := time.Since(t0); d < 600*time.Millisecond || d > 5*time.Second {
		t.Errorf("timed out after %s", d)
	}
	if len(api.puts) != 1 || api.puts[0] != "/apis/subresources.kemu.dev/v1alpha1/namespaces/ns/virtualmachineinstances/a/pause" {
		t.Errorf("PUTs %q", api.puts)
	}

	// --wait=false returns at once.
	if msg, err := pause.run(ctx, api, cs, "ns", "a", false, time.Second); err != nil || msg != "VMI ns/a was scheduled to pause" {
		t.Errorf("no wait: %q %v", msg, err)
	}

	// The "node agent" reports Paused on the second read.
	cs = fake.NewSimpleClientset(testVMI(v1.Running, nil))
	gets := 0
	cs.PrependReactor("get", "virtualmachineinstances", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets < 3 {
			return false, nil, nil
		}
		return true, testVMI(v1.Running, map[string]string{v1.VMIPausedAnnotation: "true"}, pausedTrue), nil
	})
	if msg, err := pause.run(ctx, &fakeAPI{}, cs, "ns", "a", true, 10*time.Second); err != nil || msg != "VMI ns/a was paused" {
		t.Errorf("pause: %q %v", msg, err)
	}

	// The VMI ends, or is replaced, while waiting.
	for _, tc := range []struct {
		vmi  *v1.VirtualMachineInstance
		want string
	}{
		{testVMI(v1.Failed, nil, pausedTrue), "VMI ns/a ended (phase Failed) before it was unpaused"},
		{&v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-2"}}, "VMI ns/a was deleted before it was unpaused"},
	} {
		cs = fake.NewSimpleClientset(testVMI(v1.Running, map[string]string{v1.VMIPausedAnnotation: "true"}, pausedTrue))
		gets := 0
		cs.PrependReactor("get", "virtualmachineinstances", func(k8stesting.Action) (bool, runtime.Object, error) {
			if gets++; gets < 2 {
				return false, nil, nil
			}
			return true, tc.vmi, nil
		})
		if _, err := unpause.run(ctx, &fakeAPI{}, cs, "ns", "a", true, 10*time.Second); err == nil || err.Error() != tc.want {
			t.Errorf("unpause: %v, want %q", err, tc.want)
		}
	}

	// soft-reboot waits for the value kemu-api recorded.
	cs = fake.NewSimpleClientset(testVMI(v1.Running, nil))
	reboot := vmiRequest{verb: "soft-reboot", sub: subresources.SoftReboot, pending: "soft reboot", done: "soft rebooted", doneFor: softRebootDone}
	vmis := cs.KemuV1alpha1().VirtualMachineInstances("ns")
	api = &fakeAPI{annotate: func() {
		vmi, _ := vmis.Get(ctx, "a", metav1.GetOptions{})
		vmi.Annotations = map[string]string{v1.VMISoftRebootAnnotation: "r2", v1.VMISoftRebootDoneAnnotation: "r1"}
		_, _ = vmis.Update(ctx, vmi, metav1.UpdateOptions{})
	}}
	_, err = reboot.run(ctx, api, cs, "ns", "a", true, 300*time.Millisecond)
	want = `timed out after 300ms waiting for VMI ns/a to be soft rebooted (kemu.dev/soft-reboot-done is "r1", not "r2"); is the kemu node agent on node node1 running?`
	if err == nil || err.Error() != want {
		t.Errorf("soft-reboot: %v, want %q", err, want)
	}
}

func TestEscapeReader(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		escaped  bool
	}{
		{"hello\n", "hello\n", false},
		{"ab\x1dcd", "ab", true},
		{"\x1d", "", true},
	} {
		e := &escapeReader{r: iotest.OneByteReader(strings.NewReader(tc.in)), escaped: make(chan struct{})}
		got, err := io.ReadAll(e)
		if err != nil || string(got) != tc.want || e.wasEscaped() != tc.escaped {
			t.Errorf("%q: read %q, %v, escaped %v; want %q, %v", tc.in, got, err, e.wasEscaped(), tc.want, tc.escaped)
		}
	}
	// A chunk holding the escape is cut before it.
	e := &escapeReader{r: strings.NewReader("x\x1dy"), escaped: make(chan struct{})}
	buf := make([]byte, 10)
	if n, err := e.Read(buf); n != 1 || err != nil || string(buf[:n]) != "x" {
		t.Errorf("read %d %v %q", n, err, buf[:n])
	}
	if n, err := e.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("after the escape: %d %v", n, err)
	}
}

// The remote exit status becomes kemuctl's; other exec failures exit 1
// naming the VMI and its Pod.
func TestExecResult(t *testing.T) {
	tg := &vmiTarget{ref: "VMI ns/a", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kemu-launcher-a-12345"}}}
	var errOut bytes.Buffer
	if err := tg.execResult("shell", &errOut, nil); err != nil {
		t.Errorf("nil: %v", err)
	}
	err := tg.execResult("shell", &errOut, fmt.Errorf("stream: %w", utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3}))
	if ee, ok := err.(cli.ExitError); !ok || ee.Code != 3 || errOut.Len() != 0 {
		t.Errorf("exit 3: %v, %q", err, errOut.String())
	}
	err = tg.execResult("console", &errOut, errors.New("unable to upgrade connection: forbidden"))
	if ee, ok := err.(cli.ExitError); !ok || ee.Code != 1 ||
		errOut.String() != "kemuctl console: VMI ns/a: exec in its launcher Pod kemu-launcher-a-12345: unable to upgrade connection: forbidden\n" {
		t.Errorf("failure: %v, %q", err, errOut.String())
	}
}

// Which Pods exec refuses.
func TestLauncherCheck(t *testing.T) {
	vmi := testVMI(v1.Running, nil)
	good := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{launcherpod.CreatedByLabel: "uid-1"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "compute", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
		}
	}
	for _, tc := range []struct {
		name string
		mod  func(*corev1.Pod, *v1.VirtualMachineInstance)
		want string
	}{
		{name: "ok"},
		{name: "another VMI's", mod: func(p *corev1.Pod, _ *v1.VirtualMachineInstance) { p.Labels[launcherpod.CreatedByLabel] = "uid-0" },
			want: `VMI ns/a: Pod p is not its launcher (label kemu.dev/created-by is "uid-0", not the VMI's UID uid-1)`},
		{name: "pending", mod: func(p *corev1.Pod, _ *v1.VirtualMachineInstance) { p.Status.Phase = corev1.PodPending },
			want: "VMI ns/a is not running (its launcher Pod p is Pending)"},
		{name: "deleting", mod: func(p *corev1.Pod, _ *v1.VirtualMachineInstance) { p.DeletionTimestamp = &metav1.Time{} },
			want: "VMI ns/a is stopping (its launcher Pod p is being deleted)"},
		{name: "compute not running", mod: func(p *corev1.Pod, _ *v1.VirtualMachineInstance) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}
		}, want: "VMI ns/a is not running (container compute of its launcher Pod p is not running)"},
		{name: "scheduled for the shell", mod: func(_ *corev1.Pod, v *v1.VirtualMachineInstance) { v.Status.Phase = v1.Scheduled }},
	} {
		tg := &vmiTarget{ref: "VMI ns/a", vmi: vmi.DeepCopy(), pod: good()}
		if tc.mod != nil {
			tc.mod(tg.pod, tg.vmi)
		}
		err := tg.check()
		if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// newRoot is kemuctl with its cluster verbs and shell.
func newRoot() *cobra.Command {
	c := cli.NewCluster()
	return cli.Root(cli.Name, c, append(Commands(c), shell.NewCommand(ShellThroughPod(c)))...)
}

// run executes kemuctl's cluster verbs and shell with args and stdin,
// returning stdout, stderr and the exit status main would use.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return clitest.Run(t, newRoot(), stdin, args...)
}

// TestMain lets a test run this binary as kemuctl (clitest.AsMainEnv).
func TestMain(m *testing.M) { clitest.Main(m, newRoot) }
