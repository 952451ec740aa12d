//go:build cluster

package deploytest

import (
	"bytes"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/test/cluster"
)

// ThrowawayOverlay (make demo-cluster's install) is deploy/ with kemu-config
// imageVolumes "true" and nothing else changed, and the e2e suite's overlay
// over it keeps that and adds the tests' arguments.
func TestThrowawayOverlay(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	plain := kustomize(t, filepath.Join(root, "deploy"))
	throwaway := kustomize(t, filepath.Join(root, ThrowawayOverlay))
	for kind, docs := range plain {
		if kind == "ConfigMap" {
			continue
		}
		if len(throwaway[kind]) != len(docs) {
			t.Errorf("%s: %d objects, deploy/ has %d", kind, len(throwaway[kind]), len(docs))
			continue
		}
		for i := range docs {
			if !bytes.Equal(docs[i], throwaway[kind][i]) {
				t.Errorf("%s #%d differs from deploy/'s:\n%s\n---\n%s", kind, i, throwaway[kind][i], docs[i])
			}
		}
	}
	if len(throwaway) != len(plain) {
		t.Errorf("kinds: %d, deploy/ has %d", len(throwaway), len(plain))
	}
	want := config(t, plain)
	want.Data["imageVolumes"] = "true"
	if got := config(t, throwaway); !maps.Equal(got.Data, want.Data) {
		t.Errorf("kemu-config: %v, want deploy/'s with imageVolumes \"true\": %v", got.Data, want.Data)
	}

	dir := t.TempDir()
	arg := "--node-heartbeat-timeout=40s"
	if err := Overlay(dir, "", Config{Base: ThrowawayOverlay, HostDiskDirs: "/srv/disks", ControllerArgs: []string{arg}}); err != nil {
		t.Fatal(err)
	}
	e2e := kustomize(t, dir)
	want.Data["hostDiskDirs"] = "/srv/disks"
	if got := config(t, e2e); !maps.Equal(got.Data, want.Data) {
		t.Errorf("the e2e overlay's kemu-config: %v, want %v", got.Data, want.Data)
	}
	for _, b := range e2e["Deployment"] {
		var d appsv1.Deployment
		if err := yaml.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		if d.Name == "kemu-controller" && !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, arg) {
			t.Errorf("the e2e overlay's controller has no %s: %v", arg, d.Spec.Template.Spec.Containers[0].Args)
		}
	}
}

func config(t *testing.T, objs map[string][][]byte) corev1.ConfigMap {
	t.Helper()
	for _, b := range objs["ConfigMap"] {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(b, &cm); err != nil {
			t.Fatal(err)
		}
		if cm.Name == "kemu-config" {
			return cm
		}
	}
	t.Fatal("no ConfigMap kemu-config")
	return corev1.ConfigMap{}
}
