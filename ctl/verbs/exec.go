package verbs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/shell"
)

// The launcher image's kemuctl and the launcher's command socket, as the
// compute container sees them.
const remoteKemuctl = "/usr/bin/kemuctl"

// RemoteSocket is the launcher's command socket in the compute container.
var RemoteSocket = path.Join(launcherpod.SocketsDir, launcherpod.Socket)

// remoteShellArgv is the command run in the launcher Pod's compute
// container for kemuctl shell VMI: the launcher image's kemuctl on the
// launcher socket. batch passes commands with -c (even when empty).
func remoteShellArgv(commands string, batch, jsonOut, eofHangup bool) []string {
	argv := []string{remoteKemuctl, "shell", "--socket", RemoteSocket}
	if batch {
		argv = append(argv, "-c", commands)
	}
	if eofHangup {
		argv = append(argv, "--"+shell.EOFHangupFlag)
	}
	if jsonOut {
		argv = append(argv, "-o", "json")
	}
	return argv
}

// vmiTarget is a VMI's launcher Pod, reachable with exec.
type vmiTarget struct {
	cfg  *rest.Config
	kube kubernetes.Interface
	vmi  *v1.VirtualMachineInstance
	pod  *corev1.Pod
	ref  string
}

// findLauncher finds a VMI's launcher Pod and checks that exec can reach
// its compute container (the VMI need not be Running: the shell also helps
// before and after boot).
func findLauncher(ctx context.Context, c *cli.Cluster, name string) (*vmiTarget, error) {
	cl, err := c.Clients()
	if err != nil {
		return nil, err
	}
	ns, kemu := cl.Namespace, cl.Kemu
	t := &vmiTarget{cfg: cl.Config, kube: cl.Kube, ref: fmt.Sprintf("VMI %s/%s", ns, name)}
	ctx, cancel := context.WithTimeout(ctx, vmOpTimeout)
	defer cancel()
	t.vmi, err = kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s not found", t.ref)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.ref, err)
	}
	podName := t.vmi.Status.LauncherPod
	if podName == "" {
		// Created but not yet reported: the name is fixed per VMI.
		podName = launcherpod.PodName(t.vmi)
	}
	if t.vmi.Status.Phase.IsFinal() {
		return nil, fmt.Errorf("%s is not running (phase %s)", t.ref, vmiPhase(t.vmi))
	}
	t.pod, err = t.kube.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s has no launcher Pod (%s not found; VMI phase %s)", t.ref, podName, vmiPhase(t.vmi))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: its launcher Pod %s: %w", t.ref, podName, err)
	}
	return t, t.check()
}

// check refuses a Pod that is not the VMI's running launcher.
func (t *vmiTarget) check() error {
	if got := t.pod.Labels[launcherpod.CreatedByLabel]; got != string(t.vmi.UID) {
		return fmt.Errorf("%s: Pod %s is not its launcher (label %s is %q, not the VMI's UID %s)",
			t.ref, t.pod.Name, launcherpod.CreatedByLabel, got, t.vmi.UID)
	}
	if t.pod.DeletionTimestamp != nil {
		return fmt.Errorf("%s is stopping (its launcher Pod %s is being deleted)", t.ref, t.pod.Name)
	}
	if t.pod.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("%s is not running (its launcher Pod %s is %s)", t.ref, t.pod.Name, t.pod.Status.Phase)
	}
	running := false
	for _, cs := range t.pod.Status.ContainerStatuses {
		if cs.Name == launcherpod.ComputeContainer && cs.State.Running != nil {
			running = true
		}
	}
	if !running {
		return fmt.Errorf("%s is not running (container %s of its launcher Pod %s is not running)",
			t.ref, launcherpod.ComputeContainer, t.pod.Name)
	}
	return nil
}

// execStreams are what an exec passes through.
type execStreams struct {
	in          io.Reader // nil: no stdin
	out, errOut io.Writer
	tty         bool // a terminal in the container (stderr then joins stdout)
	sizes       remotecommand.TerminalSizeQueue
}

// exec runs argv in the launcher Pod's compute container; the remote exit
// status comes back as a utilexec.ExitError.
func (t *vmiTarget) exec(ctx context.Context, argv []string, s execStreams) error {
	req := t.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.pod.Namespace).Name(t.pod.Name).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: launcherpod.ComputeContainer,
		Command:   argv,
		Stdin:     s.in != nil,
		Stdout:    true,
		Stderr:    !s.tty,
		TTY:       s.tty,
	}, scheme.ParameterCodec)
	// As kubectl exec: WebSocket first, SPDY where the WebSocket upgrade
	// fails (older apiservers, proxies).
	spdy, err := remotecommand.NewSPDYExecutor(t.cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	ws, err := remotecommand.NewWebSocketExecutor(t.cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	executor, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	opts := remotecommand.StreamOptions{Stdin: s.in, Stdout: s.out, Tty: s.tty, TerminalSizeQueue: s.sizes}
	if !s.tty {
		opts.Stderr = s.errOut
	}
	return executor.StreamWithContext(ctx, opts)
}

// execResult turns an exec's error into kemuctl's exit: the remote
// command's status, else 1 with a message.
func (t *vmiTarget) execResult(verb string, errOut io.Writer, err error) error {
	if err == nil {
		return nil
	}
	var ee utilexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		if ee.ExitStatus() == 0 {
			return nil
		}
		return cli.ExitError{Code: ee.ExitStatus()}
	}
	fmt.Fprintf(errOut, "kemuctl %s: %s: exec in its launcher Pod %s: %v\n", verb, t.ref, t.pod.Name, err)
	return cli.ExitError{Code: 1}
}

// RunShell is kemuctl shell VMI: the shell runs in the launcher Pod, on
// a terminal there when this one is interactive on one.
func RunShell(cmd *cobra.Command, c *cli.Cluster, name, commands string, jsonOut, batch bool) error {
	errOut := cmd.ErrOrStderr()
	t, err := findLauncher(cmd.Context(), c, name)
	if err != nil {
		fmt.Fprintf(errOut, "kemuctl shell: %v\n", err)
		return cli.ExitError{Code: 1}
	}
	s := execStreams{in: cmd.InOrStdin(), out: cmd.OutOrStdout(), errOut: errOut}
	inFile, inOK := s.in.(*os.File)
	outFile, outOK := s.out.(*os.File)
	if !batch && inOK && outOK && term.IsTerminal(int(inFile.Fd())) && term.IsTerminal(int(outFile.Fd())) {
		// The prompt with line editing and completion: a terminal in
		// the container, this one raw (Ctrl-C reaches the remote shell).
		fd := int(inFile.Fd())
		if old, err := term.MakeRaw(fd); err == nil {
			defer func() { _ = term.Restore(fd, old) }()
		}
		sizes := newTermSizes(int(outFile.Fd()))
		defer sizes.stop()
		s.tty, s.sizes = true, sizes
	}
	// Without a terminal, the end of the exec's stdin is all the remote
	// shell learns of this process going away (killed, connection lost):
	// for commands that read no input, stdin is held open until the exec
	// ends and its end means "client gone" there.
	eofHangup := !s.tty && batch && !shell.ReadsInput(commands)
	ctx := cmd.Context()
	if eofHangup {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		s.in = heldOpen{ctx}
	}
	err = t.exec(ctx, remoteShellArgv(commands, batch, jsonOut, eofHangup), s)
	return t.execResult("shell", errOut, err)
}

// heldOpen is a stdin that gives nothing and ends only with its context.
type heldOpen struct{ ctx context.Context }

func (h heldOpen) Read([]byte) (int, error) {
	<-h.ctx.Done()
	return 0, io.EOF
}

// termSizes reports a terminal's size, first at once and then on SIGWINCH.
type termSizes struct {
	fd    int
	sig   chan os.Signal
	sizes chan remotecommand.TerminalSize
	done  chan struct{}
}

func newTermSizes(fd int) *termSizes {
	s := &termSizes{fd: fd, sig: make(chan os.Signal, 1), sizes: make(chan remotecommand.TerminalSize, 1), done: make(chan struct{})}
	signal.Notify(s.sig, syscall.SIGWINCH)
	s.sig <- syscall.SIGWINCH // the first size
	go func() {
		for {
			select {
			case <-s.done:
				return
			case <-s.sig:
			}
			w, h, err := term.GetSize(s.fd)
			if err != nil {
				continue
			}
			select {
			case s.sizes <- remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}:
			case <-s.done:
				return
			}
		}
	}()
	return s
}

// Next implements remotecommand.TerminalSizeQueue; nil ends it.
func (s *termSizes) Next() *remotecommand.TerminalSize {
	select {
	case size := <-s.sizes:
		return &size
	case <-s.done:
		return nil
	}
}

func (s *termSizes) stop() {
	signal.Stop(s.sig)
	close(s.done)
}

// ShellThroughPod is kemuctl shell VMI as the shell command takes it, on
// the cluster c.
func ShellThroughPod(c *cli.Cluster) shell.ThroughPod {
	return shell.ThroughPod{
		Socket: RemoteSocket,
		Run: func(cmd *cobra.Command, name, commands string, jsonOut, batch bool) error {
			return RunShell(cmd, c, name, commands, jsonOut, batch)
		},
		Complete: c.CompleteVMIs,
	}
}

// Commands are kemuctl's verbs on the cluster c, but shell VMI
// (ShellThroughPod).
func Commands(c *cli.Cluster) []*cobra.Command {
	return []*cobra.Command{NewStartCommand(c), NewStopCommand(c), NewRestartCommand(c),
		NewPauseCommand(c), NewUnpauseCommand(c), NewSoftRebootCommand(c), NewConsoleCommand(c),
		NewVNCCommand(c), NewMigrateCommand(c), NewMigrateCancelCommand(c)}
}
