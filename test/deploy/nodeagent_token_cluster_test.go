//go:build cluster

package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
)

// testAgentToken checks deploy/base/nodeagent-policy.yaml with the token the
// kubelet projected into the running node agent's Pod (read from the
// node's pod volumes): it carries the node's name as its node claim, its
// heartbeat on its own Node passes, on another Node it is refused by the
// API server (test/nodeagentpolicy covers the policies in full).
func testAgentToken(ctx context.Context, t *testing.T, c *cluster.Cluster, cs kubernetes.Interface) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kemu-nodeagent"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("nodeagent pods: %v %v", err, pods)
	}
	// The projected volume is a tmpfs the kubelet mounted in the node: read
	// it through the node's mount namespace.
	toks, err := filepath.Glob(c.Nodes[0].ProcPath(filepath.Join(cluster.KubeletRoot, "pods", string(pods.Items[0].UID), "volumes", "kubernetes.io~projected", "*", "token")))
	if err != nil || len(toks) != 1 {
		t.Fatalf("the node agent Pod's projected token: %v %v", toks, err)
	}
	tok, err := os.ReadFile(toks[0])
	if err != nil {
		t.Fatal(err)
	}
	agent, err := kubernetes.NewForConfig(&rest.Config{Host: c.Host, BearerToken: strings.TrimSpace(string(tok)),
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := agent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; !slices.Equal(got, []string{c.NodeName}) {
		t.Fatalf("the node agent's token: node claim %v, want [%s] (user %+v)", got, c.NodeName, r.Status.UserInfo)
	}

	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-other-node"}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer cs.CoreV1().Nodes().Delete(context.Background(), other.Name, metav1.DeleteOptions{}) //nolint:errcheck // cleanup
	// The heartbeat's annotation (no labels: the running agent owns them).
	hb := func(node string) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			v1.NodeHeartbeatAnnotation: time.Now().UTC().Format(time.RFC3339)}}})
		_, err := agent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kemu-nodeagent"})
		return err
	}
	if err := hb(c.NodeName); err != nil {
		t.Errorf("heartbeat of its own node with the agent's token: %v", err)
	}
	err = hb(other.Name)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'kemu-nodeagent-nodes'") {
		t.Errorf("heartbeat of another node with the agent's token: %v, want refused by the policy kemu-nodeagent-nodes", err)
	}
	t.Logf("the node agent's projected token: node claim %s; another node: %v", c.NodeName, err)
}
