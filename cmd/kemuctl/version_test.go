package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/ctl/cli"
)

// The client line, the server's version, and why it is unavailable.
func TestVersionLines(t *testing.T) {
	if got, want := clientVersionLine(), "kemuctl dev (API kemu.dev/v1alpha1)"; got != want {
		t.Errorf("client: %q, want %q", got, want)
	}
	const host = "https://10.0.0.1:6443"
	gr := schema.GroupResource{Group: subresources.Group, Resource: subresources.VersionResource}
	for _, tc := range []struct {
		name string
		sv   *subresources.ServerVersion
		err  error
		want string
	}{
		{"server", &subresources.ServerVersion{GitVersion: "v0.18.0", GoVersion: "go1.26.1", Platform: "linux/amd64"}, nil,
			"kemu-api v0.18.0 (go1.26.1, linux/amd64)"},
		{"no cluster", nil, fmt.Errorf("kubeconfig: %w", cli.ErrNoCluster),
			"kemu-api version unavailable: " + cli.ErrNoCluster.Error()},
		{"not installed", nil, serverError{host: host, err: apierrors.NewNotFound(gr, "")},
			"kemu-api version unavailable: kemu-api is not installed in the cluster at https://10.0.0.1:6443 (no API subresources.kemu.dev/v1alpha1)"},
		{"not answering", nil, serverError{host: host, err: apierrors.NewServiceUnavailable("service kemu/kemu-api has no endpoints")},
			"kemu-api version unavailable: kemu-api is not answering in the cluster at https://10.0.0.1:6443 " +
				"(API subresources.kemu.dev/v1alpha1 is registered, its service is unavailable): service kemu/kemu-api has no endpoints"},
		{"forbidden", nil, serverError{host: host, err: apierrors.NewForbidden(gr, "", errors.New("RBAC says no"))},
			`kemu-api version unavailable: version.subresources.kemu.dev is forbidden: RBAC says no`},
		{"bad kubeconfig", nil, errors.New("kubeconfig: stat /x: no such file or directory"),
			"kemu-api version unavailable: kubeconfig: stat /x: no such file or directory"},
		// A 404 that is not the server's (no serverError) is not "not installed".
		{"not found elsewhere", nil, apierrors.NewNotFound(gr, "x"),
			`kemu-api version unavailable: version.subresources.kemu.dev "x" not found`},
	} {
		if got := serverVersionLine(tc.sv, tc.err); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// version --client needs no cluster; without one, version says why the
// server's is unavailable and exits 1, as kubectl version.
func TestVersionWithoutCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", t.TempDir()+"/none")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_MASTER", "")
	stdout, stderr, code := run(t, "", "version", "--client")
	if code != 0 || stdout != "kemuctl dev (API kemu.dev/v1alpha1)\n" || stderr != "" {
		t.Errorf("version --client: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	stdout, stderr, code = run(t, "", "version")
	want := "kemuctl dev (API kemu.dev/v1alpha1)\nkemu-api version unavailable: " + cli.ErrNoCluster.Error() + "\n"
	if code != 1 || stdout != want || stderr != "" {
		t.Errorf("version: exit %d, stdout %q (want %q), stderr %q", code, stdout, want, stderr)
	}
	// The commands that need no cluster work without one.
	stdout, stderr, code = run(t, "", "validate", "../../examples/standalone/vmi-testguest.yaml")
	if code != 0 || !strings.Contains(stdout, "valid") {
		t.Errorf("validate without a cluster: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
