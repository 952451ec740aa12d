//go:build cluster

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/test/cluster"
)

// TestKubectlPlugin runs kemuctl as kubectl kemu through the real kubectl
// (kubectl-kemu and kubectl_complete-kemu on $PATH) against a real
// kube-apiserver without kemu-api: version says kemu-api is not installed,
// help says kubectl kemu, and kubectl completes the plugin's arguments.
// Needs make k8s.
func TestKubectlPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("%v (run make k8s)", err)
	}
	t.Cleanup(func() { _ = c.Stop() })

	bin := t.TempDir()
	kemuctl := filepath.Join(bin, "kemuctl")
	if out, err := exec.Command("go", "build", "-o", kemuctl, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, name := range []string{cli.PluginExecutable, cli.PluginComplete} {
		if err := os.Symlink("kemuctl", filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	home := t.TempDir()
	kubectl := func(wantCode int, kubeconfig string, args ...string) (string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), args...)
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + home, "KUBECONFIG=" + kubeconfig}
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if code != wantCode {
			t.Errorf("kubectl %s: exit %d (%v), want %d; stdout %q, stderr %q", strings.Join(args, " "), code, err, wantCode, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	none := filepath.Join(t.TempDir(), "none")
	const client = "kemuctl dev (API kemu.dev/v1alpha1)\n"

	if out, _ := kubectl(0, none, "kemu", "version", "--client"); out != client {
		t.Errorf("kubectl kemu version --client: %q, want %q", out, client)
	}
	if out, _ := kubectl(1, none, "kemu", "version"); out != client+"kemu-api version unavailable: "+cli.ErrNoCluster.Error()+"\n" {
		t.Errorf("kubectl kemu version without a cluster: %q", out)
	}
	want := client + "kemu-api version unavailable: kemu-api is not installed in the cluster at " + c.Host +
		" (no API " + subresources.GroupVersion + ")\n"
	if out, _ := kubectl(1, c.Kubeconfig, "kemu", "version"); out != want {
		t.Errorf("kubectl kemu version against kube-apiserver: %q, want %q", out, want)
	}
	if out, _ := kubectl(1, none, "kemu", "version", "--kubeconfig", c.Kubeconfig); out != want {
		t.Errorf("kubectl kemu version --kubeconfig: %q, want %q", out, want)
	}

	out, _ := kubectl(0, none, "kemu", "pause", "--help")
	for _, s := range []string{"kubectl kemu pause VMI [--wait=false] [--timeout DURATION] [flags]",
		"  kubectl kemu pause myvmi -n myns", "--kubeconfig string", "-n, --namespace string"} {
		if !strings.Contains(out, s) {
			t.Errorf("kubectl kemu pause --help lacks %q:\n%s", s, out)
		}
	}
	if out, _ := kubectl(0, none, "kemu", "--help"); !strings.Contains(out, "kubectl kemu [command]") {
		t.Errorf("kubectl kemu --help:\n%s", out)
	}
	// kubectl completes a plugin's arguments with kubectl_complete-kemu.
	if out, _ := kubectl(0, none, "__complete", "kemu", "migrate-c"); !strings.HasPrefix(out, "migrate-cancel\t") {
		t.Errorf("kubectl __complete kemu migrate-c: %q", out)
	}
}
