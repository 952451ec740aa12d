//go:build cluster

package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/template"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/test/cluster"
	"github.com/kemu-dev/kemu/test/deploytest"
)

const ns = "kemu-system"

// containerDiskImage is the test guest's containerDisk as `docker save`
// tags it (hack/testguest: _out/testguest/oci/containerdisk.docker.tar).
const containerDiskImage = "kemu.local/testguest/containerdisk:latest"

// images builds _out/images when stale (hack/images/build.sh, the make
// images target) and returns the folder and the version tag.
func images(t *testing.T, root string) (dir, version string) {
	t.Helper()
	t0 := time.Now()
	cmd := exec.Command("bash", "hack/images/build.sh")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/images/build.sh (make images; needs make deps and make testguest): %v\n%s", err, out)
	}
	dir = filepath.Join(root, "_out", "images")
	b, err := os.ReadFile(filepath.Join(dir, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("images ready in %s: %s", time.Since(t0).Round(time.Millisecond), strings.TrimSpace(string(out)))
	return dir, strings.TrimSpace(string(b))
}

// poll calls f every interval until it returns nil or ctx ends (then the
// last error is returned).
func poll(ctx context.Context, interval time.Duration, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

func TestDeploy(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	imgDir, version := images(t, root)
	containerDisk := filepath.Join(root, "_out", "testguest", "oci", "containerdisk.docker.tar")
	if _, err := os.Stat(containerDisk); err != nil {
		t.Fatalf("test guest containerDisk: %v (run: make testguest)", err)
	}

	c, err := cluster.Start(context.Background(), cluster.Options{Node: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	t.Logf("control plane + node up in %s (waited %s for the node lock)", c.StartupDuration.Round(time.Millisecond), c.NodeLockWait.Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	for _, img := range deploytest.Images {
		if err := c.ImportImage(ctx, filepath.Join(imgDir, deploytest.Archive(img))); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ImportImage(ctx, containerDisk); err != nil {
		t.Fatal(err)
	}
	list, _ := c.Ctr(ctx, "images", "ls", "-q")
	wantImages := []string{"kemu.local/kemu-launcher:latest", containerDiskImage}
	for _, img := range deploytest.Images {
		wantImages = append(wantImages, "kemu.local/"+img+":"+version)
	}
	for _, want := range wantImages {
		if !strings.Contains(list, want+"\n") {
			t.Fatalf("containerd has no %s after the import:\n%s", want, list)
		}
	}
	t.Logf("images imported in %s", time.Since(t0).Round(time.Millisecond))

	dir := t.TempDir()
	if err := deploytest.Overlay(dir, version, deploytest.Config{}); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if out, _, err := c.Kubectl("apply", "-k", dir); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply -k (%s):\n%s", time.Since(t0).Round(time.Millisecond), out)
	}
	deleted := false
	defer func() {
		if !deleted {
			c.Kubectl("delete", "-k", dir, "--wait=false") //nolint:errcheck // best effort on failure
		}
	}()
	// On failure: what the kemu Pods said.
	defer func() {
		if t.Failed() {
			for _, l := range []string{"app.kubernetes.io/name=kemu-controller", "app.kubernetes.io/name=kemu-nodeagent", "app.kubernetes.io/name=kemu-api", "kemu.dev/app=launcher"} {
				out, _, _ := c.Kubectl("logs", "-A", "-l", l, "--all-containers", "--tail=40", "--prefix")
				t.Logf("logs of %s:\n%s", l, out)
			}
			out, _, _ := c.Kubectl("get", "pods", "-A", "-o", "wide")
			t.Logf("pods:\n%s", out)
			out, _, _ = c.Kubectl("get", "events", "-A", "--sort-by=.lastTimestamp")
			t.Logf("events:\n%s", out)
		}
	}()

	t.Run("controller Available", func(t *testing.T) {
		t0 := time.Now()
		err := poll(ctx, 500*time.Millisecond, func() error {
			d, err := cs.AppsV1().Deployments(ns).Get(ctx, "kemu-controller", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range d.Status.Conditions {
				if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue && d.Status.ReadyReplicas == 1 {
					return nil
				}
			}
			return fmt.Errorf("deployment status %+v", d.Status)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Available (ready = leading) %s after apply", time.Since(t0).Round(time.Millisecond))
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kemu-controller"})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("controller pods: %v %v", err, pods)
		}
		pod := pods.Items[0]
		if got := pod.Spec.Containers[0].Image; got != "kemu.local/kemu-controller:"+version {
			t.Errorf("controller image %q, want the retagged kemu.local/kemu-controller:%s", got, version)
		}
		lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, "kemu-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := lease.Spec.HolderIdentity; h == nil || *h != pod.Name {
			t.Errorf("Lease holder %v, want the Pod %s", h, pod.Name)
		}
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kemu-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := cm.Data["launcherImage"]; got != "kemu.local/kemu-launcher:"+version {
			t.Errorf("kemu-config launcherImage %q: kustomize images: did not retag it", got)
		}
	})

	t.Run("kemu-api serves", func(t *testing.T) {
		t0 := time.Now()
		kemu, err := versioned.NewForConfig(c.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		if err := deploytest.WaitKemuAPI(ctx, cs, kemu, ns, "default", containerDiskImage); err != nil {
			t.Fatal(err)
		}
		t.Logf("kemu-api Available, its APIService served and its webhooks answering %s after the controller", time.Since(t0).Round(time.Millisecond))
	})

	t.Run("nodeagent Ready, node schedulable", func(t *testing.T) {
		t0 := time.Now()
		err := poll(ctx, 500*time.Millisecond, func() error {
			ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "kemu-nodeagent", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if s := ds.Status; s.DesiredNumberScheduled != 1 || s.NumberReady != 1 || s.NumberAvailable != 1 {
				return fmt.Errorf("daemonset status %+v", s)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("DaemonSet Ready %s after the controller", time.Since(t0).Round(time.Millisecond))
		err = poll(ctx, 500*time.Millisecond, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n.Labels[v1.NodeSchedulableLabel] != "true" || n.Annotations[v1.NodeHeartbeatAnnotation] == "" {
				return fmt.Errorf("node labels %v", n.Labels)
			}
			// tun exists on every node; kvm only when the probe booted a
			// guest under KVM, vhost-net only where /dev/vhost-net exists.
			if q, ok := n.Status.Allocatable["devices.kemu.dev/tun"]; !ok || q.IsZero() {
				return fmt.Errorf("node allocatable has no devices.kemu.dev/tun: %v", n.Status.Allocatable)
			}
			tun, kvm, vhost := n.Status.Allocatable["devices.kemu.dev/tun"], n.Status.Allocatable["devices.kemu.dev/kvm"], n.Status.Allocatable["devices.kemu.dev/vhost-net"]
			t.Logf("node labels: %s=%s %s=%s; allocatable tun=%v kvm=%v vhost-net=%v", v1.NodeSchedulableLabel, n.Labels[v1.NodeSchedulableLabel],
				v1.NodeKVMLabel, n.Labels[v1.NodeKVMLabel], tun.String(), kvm.String(), vhost.String())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The launcher-image init container ran the launcher image's QEMU on the node.
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kemu-nodeagent"})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("nodeagent pods: %v %v", err, pods)
		}
		st := pods.Items[0].Status.InitContainerStatuses
		if len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 {
			t.Errorf("launcher-image init container: %+v", st)
		}
		out, _, err := c.Kubectl("-n", ns, "logs", pods.Items[0].Name, "-c", "launcher-image")
		if err != nil || !strings.Contains(out, "qemu-img version") {
			t.Errorf("launcher-image init container log %q, %v", out, err)
		}
	})

	t.Run("RBAC least privilege", func(t *testing.T) {
		checks := []struct {
			sa, verb, resource string
			want               bool
		}{
			{"kemu-controller", "create", "pods", true},
			{"kemu-controller", "update", "virtualmachineinstances.kemu.dev/status", true},
			{"kemu-controller", "patch", "nodes", true},
			{"kemu-controller", "get", "secrets", false},
			{"kemu-controller", "delete", "nodes", false},
			{"kemu-controller", "update", "virtualmachineinstances.kemu.dev", false},
			{"kemu-controller", "create", "leases.coordination.k8s.io", true},
			{"kemu-nodeagent", "patch", "nodes", true},
			{"kemu-nodeagent", "update", "virtualmachineinstances.kemu.dev/status", true},
			{"kemu-nodeagent", "patch", "virtualmachineinstances.kemu.dev/status", false},
			{"kemu-nodeagent", "get", "nodes", false},
			{"kemu-nodeagent", "create", "pods", false},
			{"kemu-nodeagent", "delete", "virtualmachineinstances.kemu.dev", false},
			{"kemu-nodeagent", "update", "virtualmachineinstances.kemu.dev", false},
			{"kemu-nodeagent", "patch", "virtualmachineinstances.kemu.dev", true},
			{"kemu-nodeagent", "get", "secrets", false},
			{"kemu-nodeagent", "create", "leases.coordination.k8s.io", false},
			{"kemu-api", "patch", "virtualmachineinstances.kemu.dev", true},
			{"kemu-api", "update", "virtualmachines.kemu.dev/status", true},
			{"kemu-api", "create", "virtualmachineinstancemigrations.kemu.dev", true},
			{"kemu-api", "update", "virtualmachineinstances.kemu.dev/status", false},
			{"kemu-api", "create", "pods", false},
			{"kemu-api", "create", "pods/exec", false},
			{"kemu-api", "get", "secrets", false},
			{"kemu-api", "list", "pods", true},
			{"kemu-api", "create", "tokenreviews.authentication.k8s.io", true},
			{"kemu-api", "create", "subjectaccessreviews.authorization.k8s.io", true},
		}
		for _, ck := range checks {
			args := []string{"auth", "can-i", ck.verb, ck.resource, "-n", ns, "--as=system:serviceaccount:" + ns + ":" + ck.sa}
			if r, sub, ok := strings.Cut(ck.resource, "/"); ok {
				args[3] = r
				args = append(args, "--subresource="+sub)
			}
			out, _, _ := c.Kubectl(args...)
			if got := strings.TrimSpace(out) == "yes"; got != ck.want {
				t.Errorf("%s can %s %s: %v, want %v", ck.sa, ck.verb, ck.resource, got, ck.want)
			}
		}
		// Nothing the running components did was refused.
		for _, l := range []string{"app.kubernetes.io/name=kemu-controller", "app.kubernetes.io/name=kemu-nodeagent", "app.kubernetes.io/name=kemu-api"} {
			out, _, err := c.Kubectl("-n", ns, "logs", "-l", l, "--tail=-1")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, "forbidden") {
				t.Errorf("%s logged a refused request:\n%s", l, out)
			}
		}
	})

	t.Run("node agent token node-restricted", func(t *testing.T) {
		testAgentToken(ctx, t, c, cs)
	})

	t.Run("cgroup2 in a launcher-like Pod", func(t *testing.T) {
		cgroupProbe(ctx, t, c)
	})

	t.Run("controller renders the launcher Pod", func(t *testing.T) {
		testControllerPod(ctx, t, c, cs, version)
	})

	// The launcher Pod as controller/template renders it: QEMU in its
	// device cgroup.
	t.Run("VM in a launcher Pod", func(t *testing.T) {
		testLauncherPod(ctx, t, c, cs, version, "cgroup")
	})
	// The same with --no-device-cgroup (template.Options.LauncherArgs, the
	// controller's way to pass launcher flags): everything but the cgroup.
	t.Run("VM in a launcher Pod without device cgroup", func(t *testing.T) {
		testLauncherPod(ctx, t, c, cs, version, "nocgroup", "--no-device-cgroup")
	})

	t.Run("delete -k cleans up", func(t *testing.T) {
		// Nothing the components did during the VMI tests was refused either.
		for _, l := range []string{"app.kubernetes.io/name=kemu-controller", "app.kubernetes.io/name=kemu-nodeagent"} {
			if out, _, err := c.Kubectl("-n", ns, "logs", "-l", l, "--tail=-1"); err != nil || strings.Contains(out, "forbidden") {
				t.Errorf("%s: refused request or no log (%v):\n%s", l, err, out)
			}
		}
		// The node agent first (docs/deploy.md, Uninstall): it labels its
		// node kemu.dev/schedulable=false on SIGTERM, which it can only do
		// while its ServiceAccount exists — delete -k removes the
		// namespace's ServiceAccounts long before the Pod stops.
		t0 := time.Now()
		if _, _, err := c.Kubectl("-n", ns, "delete", "daemonset", "kemu-nodeagent", "--cascade=foreground", "--timeout=2m"); err != nil {
			t.Fatal(err)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Labels[v1.NodeSchedulableLabel]; got != "false" {
			t.Errorf("node label %s=%q after the node agent stopped, want false", v1.NodeSchedulableLabel, got)
		}
		t.Logf("node agent deleted in %s, node %s=%s", time.Since(t0).Round(time.Millisecond), v1.NodeSchedulableLabel, n.Labels[v1.NodeSchedulableLabel])
		t0 = time.Now()
		if _, _, err := c.Kubectl("delete", "-k", dir, "--ignore-not-found", "--timeout=3m"); err != nil {
			t.Fatal(err)
		}
		deleted = true
		err = poll(ctx, time.Second, func() error {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("namespace %s still there (%v)", ns, err)
			}
			for _, name := range []string{"kemu-controller", "kemu-nodeagent"} {
				if _, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("ClusterRole %s still there (%v)", name, err)
				}
			}
			if l, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=kemu"}); err != nil || len(l.Items) > 0 {
				return fmt.Errorf("ValidatingAdmissionPolicies left: %v %v", l, err)
			}
			out, _, err := c.Kubectl("get", "crd", "-o", "name")
			if err != nil {
				return err
			}
			if strings.Contains(out, "kemu.dev") {
				return fmt.Errorf("CRDs left: %s", out)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl delete -k and everything gone in %s", time.Since(t0).Round(time.Millisecond))
	})
}

const vmiYAML = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata:
  name: guest
  namespace: default
spec:
  terminationGracePeriodSeconds: 5
  domain:
    memory:
      guest: 128Mi
    devices:
      disks:
      - name: root
        disk: {bus: virtio}
  volumes:
  - name: root
    containerDisk:
      image: ` + containerDiskImage + `
      imagePullPolicy: IfNotPresent
`

// hostLacksSysResource: this machine's capability bounding set has no
// CAP_SYS_RESOURCE (a sandbox), so runc cannot give it to a container
// ("unable to apply caps: operation not permitted").
func hostLacksSysResource(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			var bnd uint64
			fmt.Sscanf(strings.TrimSpace(v), "%x", &bnd)
			return bnd&(1<<24) == 0 // CAP_SYS_RESOURCE
		}
	}
	return false
}

// testControllerPod: a VMI created through the API gets its launcher Pod
// from the controller, with the launcher image kustomize retagged in
// kemu-config.
func testControllerPod(ctx context.Context, t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, version string) {
	if _, _, err := c.KubectlInput(vmiYAML, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	err := poll(ctx, 500*time.Millisecond, func() error {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "kemu.dev/vmi-name=guest"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d launcher pods", len(pods.Items))
		}
		pod = &pods.Items[0]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ctr := range append(pod.Spec.InitContainers[:1:1], pod.Spec.Containers...) {
		if ctr.Image != "kemu.local/kemu-launcher:"+version || ctr.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("launcher Pod container %s: image %q %s, want kemu.local/kemu-launcher:%s IfNotPresent (kemu-config)", ctr.Name, ctr.Image, ctr.ImagePullPolicy, version)
		}
	}
	time.Sleep(3 * time.Second)
	if p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		msg := string(p.Status.Phase)
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if st.State.Waiting != nil {
				msg += fmt.Sprintf("; %s waiting: %s", st.Name, st.State.Waiting.Reason)
			}
			if tr := st.State.Terminated; tr != nil {
				msg += fmt.Sprintf("; %s terminated: %s %d %s", st.Name, tr.Reason, tr.ExitCode, tr.Message)
			}
		}
		t.Logf("controller's launcher Pod %s after 3 s: %s", p.Name, msg)
	}
	if _, _, err := c.Kubectl("-n", "default", "delete", "vmi", "guest", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
}

// testLauncherPod runs the launcher Pod exactly as controller/template
// renders it for the VMI (minus CAP_SYS_RESOURCE where this machine cannot
// grant it, and without the owner reference: the VMI is not in the API, so
// neither the controller nor the node agent touches it): the kemu-copy init
// containers from the launcher image, the containerDisk copied, kemu-launcher
// serving launcher.sock. The test hands the VMI over as the node agent does
// (Sync), QEMU starts inside the Pod in its device cgroup, and `kubectl exec
// -c compute -- kemuctl shell` reads its status.
func testLauncherPod(ctx context.Context, t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, version, name string, launcherArgs ...string) {
	vmi := &v1.VirtualMachineInstance{}
	if err := yaml.UnmarshalStrict([]byte(vmiYAML), vmi); err != nil {
		t.Fatal(err)
	}
	vmi.Name, vmi.UID = name, types.UID(fmt.Sprintf("deploy-test-%d", time.Now().UnixNano()))
	v1.SetVirtualMachineInstanceDefaults(vmi)
	pod, err := template.NewService(template.Options{LauncherImage: "kemu.local/kemu-launcher:" + version,
		LauncherPullPolicy: corev1.PullIfNotPresent, LauncherArgs: launcherArgs}).Render(template.Input{VMI: vmi})
	if err != nil {
		t.Fatal(err)
	}
	pod.OwnerReferences = nil
	if hostLacksSysResource(t) {
		sc := pod.Spec.Containers[0].SecurityContext.Capabilities
		sc.Add = slices.DeleteFunc(sc.Add, func(c corev1.Capability) bool { return c == "SYS_RESOURCE" })
		t.Logf("this machine's bounding set has no CAP_SYS_RESOURCE: the compute container runs with %v", sc.Add)
	}
	t0 := time.Now()
	pod, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) //nolint:errcheck // cleanup
	err = poll(ctx, 500*time.Millisecond, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("launcher pod %s: %s %+v %+v", p.Name, p.Status.Phase, p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
		}
		pod = p
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("launcher Pod %s Running %s after create (init containers: kemu-copy out of the launcher image, then the disk)", pod.Name, time.Since(t0).Round(time.Millisecond))

	sock := filepath.Join(c.KubeletRootDir, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "sockets", "launcher.sock")
	if err := poll(ctx, 200*time.Millisecond, func() error { _, err := os.Stat(sock); return err }); err != nil {
		t.Fatal(err)
	}
	vmiJSON, err := json.Marshal(vmi)
	if err != nil {
		t.Fatal(err)
	}
	// The path is longer than a unix socket address may be (108 bytes): dial
	// it through a short symlink.
	short, err := os.MkdirTemp("", "kd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(short)
	if err := os.Symlink(sock, filepath.Join(short, "l.sock")); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(short, "l.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	defer scancel()
	t1 := time.Now()
	resp, err := rpc.NewLauncherClient(conn).Sync(sctx, &rpc.SyncRequest{VmiJson: vmiJSON})
	logs, _, _ := c.Kubectl("-n", "default", "logs", pod.Name, "-c", "compute")
	if err != nil {
		if strings.Contains(err.Error(), "no cgroup v2 hierarchy mounted") {
			t.Fatalf("Sync: %v\nThe launcher Pod as controller/template renders it cannot give QEMU its device cgroup on this node: "+
				"a container that is not privileged has no cgroup2 mount (see the cgroup2 subtest and docs/deploy.md); "+
				"the launcher must mount one itself (it has CAP_SYS_ADMIN) or the template must change.", err)
		}
		t.Fatalf("Sync: %v\nlauncher log:\n%s", err, logs)
	}
	t.Logf("Sync: %s in %s, domain %v", resp.GetAction(), time.Since(t1).Round(time.Millisecond), resp.GetDomain())
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(strings.ToLower(l), "cgroup") {
			t.Logf("launcher: %s", l)
		}
	}

	var status string
	err = poll(ctx, time.Second, func() error {
		out, _, err := c.Kubectl("-n", "default", "exec", pod.Name, "-c", "compute", "--",
			"kemuctl", "shell", "--socket", "/var/run/kemu/sockets/launcher.sock", "-c", "status")
		status = out
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Running") {
			return fmt.Errorf("status: %s", out)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nlauncher log:\n%s", err, logs)
	}
	t.Logf("kubectl exec %s -c compute -- kemuctl shell -c status:\n%s", pod.Name, status)

	// QEMU's cgroups as the host sees them: a child of the compute
	// container's cgroup2 group holds QEMU.
	if pid := resp.GetDomain().GetQemuPid(); pid != 0 {
		if hp := hostPid(pid); hp != 0 {
			cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", hp))
			if err == nil {
				t.Logf("QEMU (host pid %d) cgroups:\n%s", hp, cg)
			}
		}
	}

	t2 := time.Now()
	if err := cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = poll(ctx, 500*time.Millisecond, func() error {
		_, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.New("launcher pod still there")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("launcher Pod deleted (ACPI shutdown, grace 5 s) in %s", time.Since(t2).Round(time.Millisecond))
}

// hostPid maps QEMU's pid in the Pod's pid namespace to the host's (0:
// not found): the QEMU process whose NSpid ends with it.
func hostPid(podPid int32) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == fmt.Sprint(podPid) {
				cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				if strings.Contains(string(cmd), "qemu-system") {
					return pid
				}
			}
		}
	}
	return 0
}

// cgroupProbe runs busybox with the launcher container's capabilities (as
// controller/template renders them, not privileged) and reports what the
// container sees of the cgroup2 hierarchy and whether it can make a child
// cgroup there, as kemu-launcher does for QEMU.
func cgroupProbe(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	const script = `cat /proc/self/cgroup; grep cgroup /proc/self/mountinfo
for d in /sys/fs/cgroup /sys/fs/cgroup/unified; do
  [ -d $d ] || { echo "$d: missing"; continue; }
  if err=$(mkdir $d/kemu-probe 2>&1); then echo "$d: mkdir ok"; rmdir $d/kemu-probe; else echo "$d: mkdir failed: $err"; fi
done
self=$(sed -n 's/^0:://p' /proc/self/cgroup)
mkdir -p /kemu-cg2
if err=$(mount -t cgroup2 cgroup2 /kemu-cg2 2>&1); then
  echo "private cgroup2 mount: ok"
  [ -d /kemu-cg2$self ] && echo "own cgroup2 group /kemu-cg2$self: present" || echo "own cgroup2 group /kemu-cg2$self: missing"
  if err=$(mkdir /kemu-cg2$self/kemu-probe 2>&1); then echo "child of own group: mkdir ok"; rmdir /kemu-cg2$self/kemu-probe; else echo "child of own group: mkdir failed: $err"; fi
  umount /kemu-cg2
else
  echo "private cgroup2 mount: failed: $err"
fi
echo done`
	caps := "NET_ADMIN, SYS_ADMIN, BPF, SYS_RESOURCE"
	if hostLacksSysResource(t) {
		caps = "NET_ADMIN, SYS_ADMIN, BPF" // runc cannot grant what the host lacks
	}
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: cgroup-probe, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: probe
    image: %s
    imagePullPolicy: Never
    command: [/bin/sh, -c, %q]
    securityContext:
      capabilities: {add: [%s]}
`, cluster.BusyboxImage, script, caps)
	if _, _, err := c.KubectlInput(pod, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	defer c.Kubectl("-n", "default", "delete", "pod", "cgroup-probe", "--wait=false") //nolint:errcheck // cleanup
	var out string
	err := poll(ctx, 500*time.Millisecond, func() error {
		o, _, err := c.Kubectl("-n", "default", "logs", "cgroup-probe")
		if err != nil || !strings.Contains(o, "done") {
			return fmt.Errorf("no result yet: %v", err)
		}
		out = o
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in a Pod with %s (not privileged):\n%s", caps, out)
}
