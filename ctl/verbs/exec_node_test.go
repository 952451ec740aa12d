//go:build cluster

package verbs

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/google/go-containerregistry/pkg/name"
	crv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/cli/clitest"
	"github.com/kemu-dev/kemu/ctl/shell"
	"github.com/kemu-dev/kemu/test/cluster"
)

// execTestImage is the launcher stand-in's image: a static kemuctl
// (cmd/kemuctl) at /usr/bin/kemuctl, as in the launcher image, and
// testdata/fakelauncher, which serves the command API with canned answers
// instead of running QEMU.
const execTestImage = "kemu.local/test/kemuctl-exec:1"

// buildExecTestImage builds both binaries statically and writes the image
// as a `docker save` archive (which ctr images import reads).
func buildExecTestImage(dir string) (string, error) {
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", dir+"/", "../../cmd/kemuctl", "./testdata/fakelauncher")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"usr/", "usr/bin/", "var/", "var/run/", "tmp/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			return "", err
		}
	}
	for _, f := range []string{"kemuctl", "fakelauncher"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/bin/" + f, Mode: 0o755, Size: int64(len(b))}); err != nil {
			return "", err
		}
		if _, err := tw.Write(b); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return "", err
	}
	img, err := mutate.ConfigFile(empty.Image, &crv1.ConfigFile{Architecture: "amd64", OS: "linux",
		Config: crv1.Config{Entrypoint: []string{"/usr/bin/fakelauncher"}, Env: []string{"PATH=/usr/bin"}}})
	if err != nil {
		return "", err
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return "", err
	}
	ref, err := name.NewTag(execTestImage)
	if err != nil {
		return "", err
	}
	archive := filepath.Join(dir, "image.tar")
	return archive, tarball.WriteToFile(archive, ref, img)
}

// TestShellThroughPod runs kemuctl shell VMI against a real node (kubelet,
// containerd, runc): the exec reaches a Pod named and labelled as the VMI's
// launcher Pod, whose compute container runs the real kemuctl against a fake
// launcher (no QEMU). (kemuctl console goes through kemu-api now:
// TestConsoleAndVNCStreams.) Needs root, make k8s and
// hack/install-deps.sh's packages; fails without them.
func TestShellThroughPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// The image builds while the node starts.
	type image struct {
		archive string
		took    time.Duration
		err     error
	}
	built := make(chan image, 1)
	imageDir := t.TempDir()
	go func() {
		t0 := time.Now()
		archive, err := buildExecTestImage(imageDir)
		built <- image{archive, time.Since(t0), err}
	}()
	c := startCRDCluster(ctx, t, cluster.Options{Node: true})
	img := <-built
	if img.err != nil {
		t.Fatal(img.err)
	}
	archive := img.archive
	t.Logf("test image built in %s", img.took.Round(time.Millisecond))
	t0 := time.Now()
	if err := c.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("test image imported in %s", time.Since(t0).Round(time.Millisecond))

	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	const ns = "default"
	vmi := createVMI(ctx, t, kemu, ns, "con", v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: launcherpod.PodName(vmi), Namespace: ns, Labels: map[string]string{
			launcherpod.AppLabel: launcherpod.AppLauncher, launcherpod.CreatedByLabel: string(vmi.UID), launcherpod.VMINameLabel: vmi.Name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: vmTestPtr(int64(1)),
			AutomountServiceAccountToken:  vmTestPtr(false),
			Containers: []corev1.Container{{
				Name: launcherpod.ComputeContainer, Image: execTestImage, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"/usr/bin/fakelauncher", "--socket", RemoteSocket},
				VolumeMounts: []corev1.VolumeMount{{Name: launcherpod.SocketsVolume, MountPath: launcherpod.SocketsDir}},
				// Ready once the image's kemuctl reaches the fake.
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
					Command: remoteShellArgv("status", true, false, false)}}, PeriodSeconds: 1, TimeoutSeconds: 10},
			}},
			Volumes: []corev1.Volume{{Name: launcherpod.SocketsVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	t0 = time.Now()
	// The default ServiceAccount appears shortly after the node.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Logf("creating the Pod: %v", err)
		}
		return err == nil, nil
	}); err != nil {
		t.Fatal("creating the launcher Pod: timed out")
	}
	var last *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the launcher Pod is not Ready: %+v\n%s", last.Status, c.Logs("kubelet", 30))
	}
	t.Logf("launcher Pod ready in %s", time.Since(t0).Round(time.Millisecond))

	kemuctl := func(stdin string, wantCode int, args ...string) (string, string) {
		t.Helper()
		t0 := time.Now()
		stdout, stderr, code := run(t, stdin, append(args, "--kubeconfig", c.Kubeconfig)...)
		t.Logf("kemuctl %q: exit %d in %s", args, code, time.Since(t0).Round(time.Millisecond))
		if code != wantCode {
			t.Fatalf("kemuctl %s: exit %d, want %d\nstdout: %q\nstderr: %q", strings.Join(args, " "), code, wantCode, stdout, stderr)
		}
		return stdout, stderr
	}
	expect := func(out, want string) {
		t.Helper()
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}

	// The shell needs only the launcher Pod, not a Running VMI.
	stdout, _ := kemuctl("", 0, "shell", "con", "-c", "status")
	expect(stdout, "state:    Running (Booted)")
	expect(stdout, "pid 4242, version fake, accelerator tcg")

	setVMIStatus(ctx, t, kemu, vmi, func(s *v1.VirtualMachineInstanceStatus) {
		s.Phase, s.LauncherPod, s.NodeName = v1.Running, pod.Name, c.NodeName
	})

	// -o json passes through; a failing command's status and stderr come back.
	stdout, _ = kemuctl("", 0, "shell", "con", "-n", ns, "-o", "json", "-c", "status")
	var reply struct {
		Domain struct {
			State   string `json:"state"`
			QemuPid int    `json:"qemuPid"`
		} `json:"domain"`
	}
	if err := json.Unmarshal([]byte(stdout), &reply); err != nil || reply.Domain.State != "Running" || reply.Domain.QemuPid != 4242 {
		t.Errorf("shell -o json: %v %q", err, stdout)
	}
	stdout, stderr := kemuctl("", 1, "shell", "con", "-c", "status; frobnicate; status")
	if strings.Count(stdout, "state:") != 1 {
		t.Errorf("shell -c with a failing command: stdout %q", stdout)
	}
	expect(stderr, `error: unknown command "frobnicate"`)
	// Commands read from stdin, without a terminal anywhere.
	stdout, _ = kemuctl("status\nexit\n", 0, "shell", "con")
	expect(stdout, "connected to launcher fakelauncher (API v1)")
	expect(stdout, "state:    Running (Booted)")

	const limit = 30 * time.Second
	// The interactive shell gets a terminal in the container: the prompt,
	// completion, exit.
	t0 = time.Now()
	sc, exited, typeIn := startOnPTY(t, "shell", "con", "--kubeconfig", c.Kubeconfig)
	clitest.WaitFor(t, "the remote prompt", limit, sc, func(out string) bool {
		return strings.Contains(out, "connected to launcher fakelauncher (API v1)") && strings.Contains(out, shell.Prompt)
	})
	// The remote shell may take its terminal to raw mode a moment after the
	// prompt shows, discarding what was typed in between: type again
	// (Ctrl-U clears the line) until the completion shows.
	deadline := time.Now().Add(limit)
	for attempt := 0; !strings.Contains(sc.String(), "status"); attempt++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for sta<TAB> to complete (%d attempts); the terminal shows:\n%q", attempt, sc.String())
		}
		typeIn("\x15sta\t")
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end) && !strings.Contains(sc.String(), "status"); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	typeIn("\r")
	clitest.WaitFor(t, "the status", limit, sc, func(out string) bool { return strings.Contains(out, "Running (Booted)") })
	typeIn("exit\r")
	waitExit(t, "exit", exited, sc, limit)
	t.Logf("interactive shell on a terminal in %s", time.Since(t0).Round(time.Millisecond))

	// Without its launcher Pod the VMI cannot be reached.
	if err := kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: vmTestPtr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the launcher Pod is not gone")
	}
	_, stderr = kemuctl("", 1, "shell", "con", "-c", "status")
	expect(stderr, "kemuctl shell: VMI default/con has no launcher Pod ("+pod.Name+" not found; VMI phase Running)\n")
}

// startOnPTY runs kemuctl (this test binary as main) on a pseudo-terminal.
func startOnPTY(t *testing.T, args ...string) (*clitest.Screen, chan error, func(string)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), clitest.AsMainEnv+"=1", "TERM=xterm", "HOME="+home, "XDG_CACHE_HOME="+home)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); tty.Close() })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sc := &clitest.Screen{}
	go func() { _, _ = clitest.CopyAll(sc, tty) }()
	return sc, exited, func(s string) {
		t.Helper()
		if _, err := tty.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
}

func waitExit(t *testing.T, what string, exited chan error, sc *clitest.Screen, limit time.Duration) {
	t.Helper()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after %s: %v\n%q", what, err, sc.String())
		}
	case <-time.After(limit):
		t.Fatalf("%s did not end kemuctl:\n%q", what, sc.String())
	}
}
