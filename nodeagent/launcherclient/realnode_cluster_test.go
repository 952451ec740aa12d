//go:build cluster

package launcherclient

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/test/cluster"
)

// TestRealKubelet checks the verification against what a real kubelet and
// containerd make (test/cluster's node: cgroupfs driver): two Pods each
// running a real kemu-launcher (static, from a hostPath, in busybox) with
// its sockets emptyDir, seen from the host as the node agent sees them (the
// test runs in the host's PID namespace, as the agent does with hostPID).
// Each Pod's launcher is accepted with its pid and its VMI UID; a launcher
// of another VMI is refused; then, through kubectl exec as a tenant could,
// Pod a's launcher.sock becomes a symlink to Pod b's socket: refused, and
// b's launcher sees no RPC.
func TestRealKubelet(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin := t.TempDir()
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "kemu-launcher"), "./cmd/kemu-launcher")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kemu-launcher: %v\n%s", err, out)
	}
	c, err := cluster.Start(ctx, cluster.Options{Node: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("cluster stop: %v", err)
		}
	}()
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())

	type launcherPod struct {
		name   string
		vmiUID types.UID
		pod    *corev1.Pod
		target Target
	}
	pods := []*launcherPod{{name: "launcher-a", vmiUID: uuid.NewUUID()}, {name: "launcher-b", vmiUID: uuid.NewUUID()}}
	for _, p := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default"},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "compute", Image: cluster.BusyboxImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"/kemu/kemu-launcher", "--sockets-dir=/sockets", "--runtime-dir=/tmp/vm",
						"--qemu-timeout=10m", "--pod-network=false", "--vmi-uid=" + string(p.vmiUID), "-v=4"},
					VolumeMounts: []corev1.VolumeMount{{Name: launcherpod.SocketsVolume, MountPath: "/sockets"}, {Name: "kemu", MountPath: "/kemu", ReadOnly: true}},
				}},
				Volumes: []corev1.Volume{
					{Name: launcherpod.SocketsVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "kemu", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: bin}}},
				},
			},
		}
		if p.pod, err = kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p.target = Target{KubeletRoot: c.KubeletRootDir, PodUID: p.pod.UID, VMIUID: p.vmiUID}
	}
	for _, p := range pods {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			ok, err := Ready(p.target)
			return ok && err == nil, nil
		})
		if err != nil {
			out, _, _ := c.Kubectl("describe", "pod", p.name)
			t.Fatalf("%s: no launcher socket: %v\n%s", p.name, err, out)
		}
	}
	a, b := pods[0], pods[1]

	cl, info, err := Dial(ctx, a.target)
	if err != nil {
		t.Fatalf("Dial of Pod a's own launcher: %v", err)
	}
	pid := cl.PeerPID()
	cl.Close()
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	cg, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	t.Logf("Pod a's launcher: pid %d (%s), Info vmi_uid %s; its /proc/<pid>/cgroup:\n%s", pid,
		strings.ReplaceAll(string(cmdline), "\x00", " "), info.GetVmiUid(), cg)
	if !strings.HasPrefix(string(cmdline), "/kemu/kemu-launcher\x00") {
		t.Errorf("the verified pid %d is not the launcher: %q", pid, cmdline)
	}

	_, _, err = Dial(ctx, Target{KubeletRoot: c.KubeletRootDir, PodUID: a.pod.UID, VMIUID: b.vmiUID})
	var ue *UnverifiedError
	if !errors.As(err, &ue) || ue.Reason != ReasonVMIUIDMismatch {
		t.Errorf("Dial with another VMI's UID = %v, want %s", err, ReasonVMIUIDMismatch)
	}

	// As a tenant with a shell in Pod a: point launcher.sock at b's.
	bSocket := SocketPath(c.KubeletRootDir, b.pod.UID)
	if out, stderr, err := c.Kubectl("exec", a.name, "-c", "compute", "--", "sh", "-c",
		"rm /sockets/launcher.sock && ln -s "+bSocket+" /sockets/launcher.sock && ls -l /sockets"); err != nil {
		t.Fatalf("kubectl exec: %v\n%s%s", err, out, stderr)
	} else {
		t.Logf("in Pod a: %s", strings.TrimSpace(out))
	}
	if _, err := Ready(a.target); !errors.Is(err, ErrUnverified) {
		t.Errorf("Ready = %v, want ErrUnverified", err)
	}
	if err := Alive(a.target); !errors.Is(err, ErrUnverified) {
		t.Errorf("Alive = %v, want ErrUnverified", err)
	}
	_, _, err = Dial(ctx, a.target)
	if !errors.As(err, &ue) || ue.Reason != ReasonSymlink {
		t.Fatalf("Dial through the symlink = %v, want %s", err, ReasonSymlink)
	}
	t.Logf("refused: %v", err)
	logs, _, err := c.Kubectl("logs", b.name, "-c", "compute")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"RPC`) && !strings.Contains(l, "/Ping") {
			t.Errorf("Pod b's launcher got an RPC: %s", l)
		}
	}
}
