package main

import (
	"os"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/kube/nodeapi"
)

// deploy/base/nodeagent.yaml serves the node agent's API where kemu-api looks:
// --api-addr on nodeapi.DefaultPort, the container port nodeapi.PortName.
func TestDeployAPIPort(t *testing.T) {
	b, err := os.ReadFile("../../deploy/base/nodeagent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if want := "--api-addr=:" + strconv.Itoa(nodeapi.DefaultPort); !slices.Contains(c.Args, want) {
		t.Errorf("args %q lack %s", c.Args, want)
	}
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == nodeapi.PortName })
	if i < 0 || c.Ports[i].ContainerPort != nodeapi.DefaultPort {
		t.Errorf("ports %v: want %s on %d", c.Ports, nodeapi.PortName, nodeapi.DefaultPort)
	}
}
