//go:build cluster

package nodeagentpolicy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/nodeagent/heartbeat"
	nodeagentvmi "github.com/kemu-dev/kemu/nodeagent/vmi"
	"github.com/kemu-dev/kemu/test/cluster"
)

const (
	// ns is where deploy/kustomization.yaml puts kemu; sa the node agent's
	// ServiceAccount (deploy/base/nodeagent-rbac.yaml).
	ns = "kemu-system"
	sa = "kemu-nodeagent"
	// tenant holds the test's VMIs.
	tenant = "tenant"
	// nodeA and nodeB are Node objects without kubelets.
	nodeA, nodeB = "node-a", "node-b"
	// component is the node agent's event source, which the policy admits.
	component = nodeagentvmi.EventComponent
	// nodeNameKey is the user extra kube-apiserver fills from a Pod-bound
	// token's node claim (k8s.io/apiserver/pkg/authentication/serviceaccount.NodeNameKey).
	nodeNameKey = "authentication.kubernetes.io/node-name"
)

// shipped is deploy/base/nodeagent-policy.yaml as parsed; the test reads it for
// names and applies it through kubectl apply -k deploy/.
type shipped struct {
	policies []*admissionv1.ValidatingAdmissionPolicy
	bindings map[string]*admissionv1.ValidatingAdmissionPolicyBinding // by policy name
	// policy names the policy matching a resource (no subresource).
	policy map[string]string
}

func policyFile(t *testing.T, root string) shipped {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "deploy", "base", "nodeagent-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sh := shipped{bindings: map[string]*admissionv1.ValidatingAdmissionPolicyBinding{}, policy: map[string]string{}}
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatal(err)
		}
		switch tm.Kind {
		case "ValidatingAdmissionPolicy":
			p := &admissionv1.ValidatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict(doc, p); err != nil {
				t.Fatal(err)
			}
			sh.policies = append(sh.policies, p)
			for _, rule := range p.Spec.MatchConstraints.ResourceRules {
				for _, res := range rule.Resources {
					if !strings.Contains(res, "/") {
						sh.policy[res] = p.Name
					}
				}
			}
		case "ValidatingAdmissionPolicyBinding":
			b := &admissionv1.ValidatingAdmissionPolicyBinding{}
			if err := yaml.UnmarshalStrict(doc, b); err != nil {
				t.Fatal(err)
			}
			sh.bindings[b.Spec.PolicyName] = b
		case "":
		default:
			t.Fatalf("nodeagent-policy.yaml: unexpected kind %q", tm.Kind)
		}
	}
	for _, res := range []string{"virtualmachineinstances", "nodes", "events"} {
		if sh.policy[res] == "" {
			t.Fatalf("nodeagent-policy.yaml: no policy matches %s", res)
		}
	}
	return sh
}

// client is a set of clients that authenticate with one token.
type client struct {
	kube kubernetes.Interface
	kemu versioned.Interface
}

func newClient(t *testing.T, c *cluster.Cluster, token string) client {
	t.Helper()
	cfg := &rest.Config{Host: c.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert}, QPS: 100, Burst: 200}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kemu, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client{kube: kube, kemu: kemu}
}

// token asks for a token of the node agent's ServiceAccount as an operator
// would, with kubectl create token (extra flags: the bound object).
func token(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	out, _, err := c.Kubectl(append([]string{"-n", ns, "create", "token", sa, "--duration=15m"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// outcome of a request: admitted, refused by RBAC (authorization, before
// admission) or refused by a policy.
type outcome int

const (
	allowed outcome = iota
	byRBAC
	byPolicy
)

func (o outcome) String() string {
	return [...]string{"allowed", "refused by RBAC", "refused by the policy"}[o]
}

// expect is an outcome; for byPolicy also the policy and a fragment of its
// message.
type expect struct {
	o           outcome
	policy, msg string
}

var (
	ok   = expect{o: allowed}
	rbac = expect{o: byRBAC}
)

func deny(policy, msg string) expect { return expect{byPolicy, policy, msg} }

// check compares a request's error with the expected outcome.
func check(t *testing.T, err error, want expect) {
	t.Helper()
	switch want.o {
	case allowed:
		if err != nil {
			t.Errorf("refused, want allowed: %v", err)
		}
	case byRBAC:
		if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("got %v, want a 403 from RBAC", err)
		}
	case byPolicy:
		// The binding has the policy's name.
		prefix := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: ", want.policy, want.policy)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), prefix) || !strings.Contains(err.Error(), want.msg) {
			t.Errorf("got %v, want a 403 from the policy (%q ... %q)", err, prefix, want.msg)
		}
	}
	if err != nil {
		t.Logf("%s: %v", want.o, err)
	}
}

// updateStatus is the node agent's status write (nodeagent/vmi's
// updateStatus): read, change, UpdateStatus.
func updateStatus(ctx context.Context, cl client, name string, change func(*v1.VirtualMachineInstance)) error {
	vmi, err := cl.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get %s: %w", name, err)
	}
	change(vmi)
	_, err = cl.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).UpdateStatus(ctx, vmi, metav1.UpdateOptions{})
	return err
}

// synced is a real node agent status change: nodeagent/vmi.ApplyStatus
// after a successful Sync (the Synchronized condition, dropped first so
// that every call writes).
func synced(vmi *v1.VirtualMachineInstance) {
	vmi.Status.Conditions = slices.DeleteFunc(vmi.Status.Conditions, func(c v1.VirtualMachineInstanceCondition) bool {
		return c.Type == v1.VirtualMachineInstanceSynchronized
	})
	nodeagentvmi.ApplyStatus(vmi, nodeagentvmi.Observation{Synced: true, Now: metav1.Now()})
}

// softRebootDone is the node agent's other VMI write: the acknowledgement
// annotation, a merge patch of the VMI.
func softRebootDone(ctx context.Context, cl client, name string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{v1.VMISoftRebootDoneAnnotation: time.Now().Format(time.RFC3339Nano)}}})
	_, err := cl.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// beat is the node agent's heartbeat (nodeagent/heartbeat) for node.
func beat(ctx context.Context, cl client, node string) error {
	return heartbeat.Beat(ctx, heartbeat.Config{Client: cl.kube, NodeName: node, KVM: func(context.Context) bool { return false }})
}

func mergePatchNode(ctx context.Context, cl client, node string, patch map[string]any, sub ...string) error {
	b, _ := json.Marshal(patch)
	_, err := cl.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{}, sub...)
	return err
}

// coreEvent is an Event as client-go's recorder (tools/record) makes it for
// EventSource{Component: comp, Host: host}.
func coreEvent(name, comp, host string, about corev1.ObjectReference) *corev1.Event {
	now := metav1.Now()
	evNS := about.Namespace
	if evNS == "" {
		evNS = metav1.NamespaceDefault
	}
	return &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: evNS},
		InvolvedObject:      about,
		Reason:              "PolicyTest",
		Message:             "written by the node agent policy test",
		Type:                corev1.EventTypeNormal,
		Source:              corev1.EventSource{Component: comp, Host: host},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: comp,
		ReportingInstance:   host,
	}
}

func vmiRef(vmi *v1.VirtualMachineInstance) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: v1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance",
		Namespace: vmi.Namespace, Name: vmi.Name, UID: vmi.UID}
}

const vmiSpec = `
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      disks:
      - name: root
        disk: {bus: virtio}
  volumes:
  - name: root
    containerDisk: {image: kemu.local/testguest/containerdisk:latest}
`

func TestNodeAgentPolicy(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sh := policyFile(t, root)
	pv, pn, pe := sh.policy["virtualmachineinstances"], sh.policy["nodes"], sh.policy["events"]

	// The ServiceAccount admission plugin on, as in a real cluster: the
	// agent's Pods get their projected token volume; the ServiceAccount
	// comes from deploy/. kube-controller-manager runs only the
	// ServiceAccount controller (test/cluster waits for the default one)
	// and the policy status controller, which type-checks the CEL.
	c, err := cluster.Start(context.Background(), cluster.Options{
		ServiceAccountAdmission: true,
		ControllerManager:       true,
		ControllerManagerArgs:   []string{"--controllers=serviceaccount-controller,validatingadmissionpolicy-status-controller"},
		Logf:                    t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	kemuAdmin, err := versioned.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	// kemu as a user installs it. No kubelet, no scheduler: the DaemonSet
	// and Deployment stay without Pods; nothing but the test writes.
	t0 := time.Now()
	if out, _, err := c.Kubectl("apply", "-k", filepath.Join(root, "deploy")); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply -k deploy/:\n%s", out)
	}
	// No kemu-api runs here (no kubelet): its webhooks, whose failure
	// policy is Fail, would refuse every VMI write this test makes.
	if _, _, err := c.Kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "kemu-api"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/virtualmachineinstances.kemu.dev"); err != nil {
		t.Fatal(err)
	}

	t.Run("policies as shipped", func(t *testing.T) {
		first := sh.policies[0]
		for _, p := range sh.policies {
			got, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if fp := got.Spec.FailurePolicy; fp == nil || *fp != admissionv1.Fail {
				t.Errorf("%s: failurePolicy %v, want Fail", p.Name, fp)
			}
			if got.Namespace != "" {
				t.Errorf("%s: namespace %q: cluster-scoped objects have none", p.Name, got.Namespace)
			}
			b, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: binding of the same name: %v", p.Name, err)
			}
			if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) || b.Spec.MatchResources != nil {
				t.Errorf("binding %+v, want policy %s, actions [Deny], no narrower match", b.Spec, p.Name)
			}
			// The shared parts are the same in every policy (the YAML's
			// header says so).
			if !reflect.DeepEqual(p.Spec.MatchConditions, first.Spec.MatchConditions) ||
				!reflect.DeepEqual(p.Spec.Variables[0], first.Spec.Variables[0]) || p.Spec.Variables[0].Name != "node" ||
				!reflect.DeepEqual(p.Spec.Validations[0], first.Spec.Validations[0]) {
				t.Errorf("%s: match condition, variable node or first validation differ from %s's", p.Name, first.Name)
			}
		}
		if len(sh.bindings) != len(sh.policies) {
			t.Errorf("%d bindings for %d policies", len(sh.bindings), len(sh.policies))
		}

		// The status controller type-checks the validations (not the
		// variables) against the OpenAPI schemas of the matched kinds: a
		// misspelt field shows as a warning (at run time it would be an
		// error, and with failurePolicy Fail a refused write). Unbound
		// copies with one validation per variable have the variables
		// checked too.
		var names []string
		for _, p := range sh.policies {
			checked := p.DeepCopy()
			checked.Name += "-typecheck"
			for _, v := range p.Spec.Variables {
				checked.Spec.Validations = append(checked.Spec.Validations, admissionv1.Validation{
					Expression: fmt.Sprintf("(%[1]s) == (%[1]s)", v.Expression), Message: "variable " + v.Name})
			}
			if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, checked, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			names = append(names, p.Name, checked.Name)
		}
		for _, name := range names {
			err = cluster.Poll(ctx, func() error {
				got, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if got.Status.ObservedGeneration != got.Generation || got.Status.TypeChecking == nil {
					return fmt.Errorf("%s not type-checked yet: %+v", name, got.Status)
				}
				if w := typeWarnings(got.Status.TypeChecking.ExpressionWarnings); len(w) > 0 {
					return cluster.StopPolling{Err: fmt.Errorf("%s: type-checking warnings:\n%s", name, strings.Join(w, "\n"))}
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}
	})

	// Two Nodes (no kubelets: plain API objects), a label someone else
	// owns; VMIs on node-a, on node-b and one not scheduled yet.
	for _, n := range []string{nodeA, nodeB} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vmis := map[string]*v1.VirtualMachineInstance{}
	for name, node := range map[string]string{"vmi-a": nodeA, "vmi-b": nodeB, "vmi-pending": ""} {
		vmi := &v1.VirtualMachineInstance{}
		if err := yaml.UnmarshalStrict([]byte(vmiSpec), vmi); err != nil {
			t.Fatal(err)
		}
		vmi.Name, vmi.Namespace = name, tenant
		vmi, err := kemuAdmin.KemuV1alpha1().VirtualMachineInstances(tenant).Create(ctx, vmi, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node != "" {
			// What the controller does once the launcher Pod is bound.
			vmi.Status.Phase, vmi.Status.NodeName = v1.Scheduled, node
			if vmi, err = kemuAdmin.KemuV1alpha1().VirtualMachineInstances(tenant).UpdateStatus(ctx, vmi, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		vmis[name] = vmi
	}
	// vmi-m runs on node-a and migrates to node-b (what the controller
	// writes at Scheduled).
	{
		vmi := &v1.VirtualMachineInstance{}
		if err := yaml.UnmarshalStrict([]byte(vmiSpec), vmi); err != nil {
			t.Fatal(err)
		}
		vmi.Name, vmi.Namespace = "vmi-m", tenant
		vmi, err := kemuAdmin.KemuV1alpha1().VirtualMachineInstances(tenant).Create(ctx, vmi, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vmi.Status.Phase, vmi.Status.NodeName = v1.Running, nodeA
		vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m-1", SourceNode: nodeA, TargetNode: nodeB,
			SourcePod: "launcher-a", TargetPod: "launcher-b"}
		if _, err = kemuAdmin.KemuV1alpha1().VirtualMachineInstances(tenant).UpdateStatus(ctx, vmi, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	migration := func(f func(*v1.VirtualMachineInstanceMigrationState)) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) { f(vmi.Status.MigrationState) }
	}
	kept := "may not change status.nodeName nor the identity of status.migrationState"

	// Node agent Pods as the DaemonSet makes them, bound to node-a and
	// node-b (they never run: no kubelet), and one not scheduled.
	for name, node := range map[string]string{"agent-a": nodeA, "agent-b": nodeB, "agent-unscheduled": ""} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node,
				Containers: []corev1.Container{{Name: "nodeagent", Image: "kemu.local/kemu-nodeagent:latest"}}},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agentA := newClient(t, c, token(t, c, "--bound-object-kind=Pod", "--bound-object-name=agent-a"))
	agentB := newClient(t, c, token(t, c, "--bound-object-kind=Pod", "--bound-object-name=agent-b"))
	unscheduled := newClient(t, c, token(t, c, "--bound-object-kind=Pod", "--bound-object-name=agent-unscheduled"))
	plain := newClient(t, c, token(t, c))

	t.Run("node claim", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			cl   client
			want []string
		}{
			{"bound to agent-a on node-a", agentA, []string{nodeA}},
			{"bound to agent-b on node-b", agentB, []string{nodeB}},
			{"bound to an unscheduled Pod", unscheduled, nil},
			{"not bound", plain, nil},
		} {
			r, err := tc.cl.kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			u := r.Status.UserInfo
			if u.Username != "system:serviceaccount:"+ns+":"+sa {
				t.Errorf("%s: user %q", tc.name, u.Username)
			}
			if got := u.Extra[nodeNameKey]; !slices.Equal(got, tc.want) {
				t.Errorf("%s: extra %s = %v, want %v", tc.name, nodeNameKey, got, tc.want)
			}
			keys := make([]string, 0, len(u.Extra))
			for k := range u.Extra {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			t.Logf("%s: %s, extra keys %v", tc.name, u.Username, keys)
		}
	})

	setNode := func(node string) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) { synced(vmi); vmi.Status.NodeName = node }
	}
	onVMIA := vmiRef(vmis["vmi-a"])
	nodeRef := func(n string) corev1.ObjectReference {
		return corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: n}
	}
	// The controller's event on vmi-a (written by the admin here).
	ctrlEvent, err := admin.CoreV1().Events(tenant).Create(ctx, coreEvent("from-controller", "kemu-controller", "", onVMIA), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// kube-apiserver loads a policy a moment after it is created: wait
	// until each refuses a write without a node claim.
	err = cluster.Poll(ctx, func() error {
		probe := coreEvent("", component, nodeA, onVMIA)
		probe.GenerateName = "probe-"
		_, evErr := plain.kube.CoreV1().Events(tenant).Create(ctx, probe, metav1.CreateOptions{})
		for p, err := range map[string]error{pv: updateStatus(ctx, plain, "vmi-a", synced), pn: beat(ctx, plain, nodeA), pe: evErr} {
			if err == nil || !strings.Contains(err.Error(), "'"+p+"'") {
				return fmt.Errorf("%s not in force yet: %v", p, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("policies in force %s after kubectl apply", time.Since(t0).Round(time.Millisecond))

	eventPatch := func(cl client, e *corev1.Event) error {
		// As the recorder repeats an event: count and lastTimestamp.
		b, _ := json.Marshal(map[string]any{"count": e.Count + 1, "lastTimestamp": metav1.Now()})
		_, err := cl.kube.CoreV1().Events(e.Namespace).Patch(ctx, e.Name, types.StrategicMergePatchType, b, metav1.PatchOptions{})
		return err
	}

	cases := []struct {
		name string
		do   func() error
		want expect
	}{
		// VMIs: node-a's agent writes node-a's VMIs, nothing else.
		{"status of a VMI on its node", func() error { return updateStatus(ctx, agentA, "vmi-a", synced) }, ok},
		{"soft-reboot-done on a VMI on its node", func() error { return softRebootDone(ctx, agentA, "vmi-a") }, ok},
		{"status of a VMI on node-b", func() error { return updateStatus(ctx, agentA, "vmi-b", synced) }, deny(pv, "may only update VMIs whose status.nodeName is node-a")},
		{"annotation of a VMI on node-b", func() error { return softRebootDone(ctx, agentA, "vmi-b") }, deny(pv, "(not UPDATE VMI tenant/vmi-b)")},
		{"move a VMI from node-b onto node-a", func() error { return updateStatus(ctx, agentA, "vmi-b", setNode(nodeA)) }, deny(pv, "before and after the update")},
		{"bind an unscheduled VMI to node-a", func() error { return updateStatus(ctx, agentA, "vmi-pending", setNode(nodeA)) }, deny(pv, "before and after the update")},
		{"hand its VMI to node-b", func() error { return updateStatus(ctx, agentA, "vmi-a", setNode(nodeB)) }, deny(pv, "before and after the update")},
		{"unbind its VMI", func() error { return updateStatus(ctx, agentA, "vmi-a", setNode("")) }, deny(pv, "before and after the update")},
		{"patch a VMI's status (RBAC: update only)", func() error {
			_, err := agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Patch(ctx, "vmi-a", types.MergePatchType, []byte(`{"status":{"reason":"x"}}`), metav1.PatchOptions{}, "status")
			return err
		}, rbac},
		{"delete a VMI on its node", func() error {
			return agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Delete(ctx, "vmi-a", metav1.DeleteOptions{})
		}, rbac},
		{"node-b's agent: status of a VMI on node-b", func() error { return updateStatus(ctx, agentB, "vmi-b", synced) }, ok},
		{"node-b's agent: status of a VMI on node-a", func() error { return updateStatus(ctx, agentB, "vmi-a", synced) }, deny(pv, "may only update VMIs whose status.nodeName is node-b")},

		// A migrating VMI: the source's agent (node-a, status.nodeName)
		// and the target's (node-b, migrationState.targetNode) write
		// their fields of migrationState; neither changes its identity or
		// status.nodeName; a third node's agent nothing.
		{"target agent: targetNodeAddress of a VMI migrating to node-b", func() error {
			return updateStatus(ctx, agentB, "vmi-m", migration(func(m *v1.VirtualMachineInstanceMigrationState) {
				m.TargetNodeAddress, m.TargetMigrationPort, m.TargetNodeDomainDetected = "10.250.0.12", 8186, true
			}))
		}, ok},
		{"source agent: startTimestamp of its migrating VMI", func() error {
			return updateStatus(ctx, agentA, "vmi-m", migration(func(m *v1.VirtualMachineInstanceMigrationState) { n := metav1.Now(); m.StartTimestamp = &n }))
		}, ok},
		{"target agent: take the VMI (status.nodeName = node-b)", func() error { return updateStatus(ctx, agentB, "vmi-m", setNode(nodeB)) }, deny(pv, kept)},
		{"target agent: change migrationState.targetPod", func() error {
			return updateStatus(ctx, agentB, "vmi-m", migration(func(m *v1.VirtualMachineInstanceMigrationState) { m.TargetPod = "other" }))
		}, deny(pv, kept)},
		{"source agent: change migrationState.migrationUid", func() error {
			return updateStatus(ctx, agentA, "vmi-m", migration(func(m *v1.VirtualMachineInstanceMigrationState) { m.MigrationUID = "m-2" }))
		}, deny(pv, kept)},
		{"source agent: change migrationState.sourceNode", func() error {
			return updateStatus(ctx, agentA, "vmi-m", migration(func(m *v1.VirtualMachineInstanceMigrationState) { m.SourceNode = nodeB }))
		}, deny(pv, kept)},
		{"source agent: redirect the migration (targetNode = node-a)", func() error {
			return updateStatus(ctx, agentA, "vmi-m", migration(func(m *v1.VirtualMachineInstanceMigrationState) { m.TargetNode = nodeA }))
		}, deny(pv, kept)},
		{"target agent: drop the migration's targetNode (loses its reach)", func() error {
			return updateStatus(ctx, agentB, "vmi-m", migration(func(m *v1.VirtualMachineInstanceMigrationState) { m.TargetNode = "" }))
		}, deny(pv, "before and after the update")},

		// Nodes: its own, and only kemu.dev/ labels and annotations.
		{"heartbeat of its node", func() error { return beat(ctx, agentA, nodeA) }, ok},
		{"mark its node unschedulable", func() error {
			return heartbeat.MarkUnschedulable(ctx, heartbeat.Config{Client: agentA.kube, NodeName: nodeA, KVM: func(context.Context) bool { return false }})
		}, ok},
		{"heartbeat of node-b", func() error { return beat(ctx, agentA, nodeB) }, deny(pn, "may only update Node node-a (not UPDATE Node node-b)")},
		{"another label on its node", func() error {
			return mergePatchNode(ctx, agentA, nodeA, map[string]any{"metadata": map[string]any{"labels": map[string]string{"node-role.kubernetes.io/control-plane": ""}}})
		}, deny(pn, "only kemu.dev/ labels and annotations")},
		{"change a label it does not own", func() error {
			return mergePatchNode(ctx, agentA, nodeA, map[string]any{"metadata": map[string]any{"labels": map[string]any{"topology.kubernetes.io/zone": nil}}})
		}, deny(pn, "only kemu.dev/ labels and annotations")},
		{"another annotation on its node", func() error {
			return mergePatchNode(ctx, agentA, nodeA, map[string]any{"metadata": map[string]any{"annotations": map[string]string{"example.com/x": "y"}}})
		}, deny(pn, "only kemu.dev/ labels and annotations")},
		{"cordon its node", func() error {
			return mergePatchNode(ctx, agentA, nodeA, map[string]any{"spec": map[string]any{"unschedulable": true}})
		}, deny(pn, "only kemu.dev/ labels and annotations")},
		{"owner reference on its node", func() error {
			return mergePatchNode(ctx, agentA, nodeA, map[string]any{"metadata": map[string]any{"ownerReferences": []map[string]any{
				{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-000000000000"}}}})
		}, deny(pn, "only kemu.dev/ labels and annotations")},
		{"status of its node (RBAC)", func() error {
			return mergePatchNode(ctx, agentA, nodeA, map[string]any{"status": map[string]any{"capacity": map[string]string{"example.com/x": "1"}}}, "status")
		}, rbac},
		{"delete its node (RBAC)", func() error { return agentA.kube.CoreV1().Nodes().Delete(ctx, nodeA, metav1.DeleteOptions{}) }, rbac},

		// Events: its own, about a VMI or its Node.
		{"event about a VMI from itself", func() error {
			e, err := agentA.kube.CoreV1().Events(tenant).Create(ctx, coreEvent("from-agent-a", component, nodeA, onVMIA), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			return eventPatch(agentA, e)
		}, ok},
		{"event about its Node", func() error {
			_, err := agentA.kube.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, coreEvent("node-a-event", component, nodeA, nodeRef(nodeA)), metav1.CreateOptions{})
			return err
		}, ok},
		{"event posing as node-b's agent", func() error {
			_, err := agentA.kube.CoreV1().Events(tenant).Create(ctx, coreEvent("as-node-b", component, nodeB, onVMIA), metav1.CreateOptions{})
			return err
		}, deny(pe, "source kemu-nodeagent on host node-a")},
		{"event posing as the controller", func() error {
			_, err := agentA.kube.CoreV1().Events(tenant).Create(ctx, coreEvent("as-controller", "kemu-controller", nodeA, onVMIA), metav1.CreateOptions{})
			return err
		}, deny(pe, "source kemu-nodeagent on host node-a")},
		{"event without a source host", func() error {
			_, err := agentA.kube.CoreV1().Events(tenant).Create(ctx, coreEvent("no-host", component, "", onVMIA), metav1.CreateOptions{})
			return err
		}, deny(pe, "host node-a")},
		{"event about a Pod", func() error {
			pod := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "agent-b"}
			_, err := agentA.kube.CoreV1().Events(ns).Create(ctx, coreEvent("about-pod", component, nodeA, pod), metav1.CreateOptions{})
			return err
		}, deny(pe, "about a kemu.dev VMI or Node node-a")},
		{"event about node-b", func() error {
			_, err := agentA.kube.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, coreEvent("about-node-b", component, nodeA, nodeRef(nodeB)), metav1.CreateOptions{})
			return err
		}, deny(pe, "about a kemu.dev VMI or Node node-a")},
		{"bump the controller's event", func() error { return eventPatch(agentA, ctrlEvent) }, deny(pe, "source kemu-nodeagent on host node-a")},
		{"events.k8s.io (RBAC)", func() error {
			e := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev", Namespace: tenant}, EventTime: metav1.NowMicro(),
				ReportingController: component, ReportingInstance: nodeA, Action: "Test", Reason: "PolicyTest", Type: "Normal", Regarding: onVMIA}
			_, err := agentA.kube.EventsV1().Events(tenant).Create(ctx, e, metav1.CreateOptions{})
			return err
		}, rbac},

		// Without a node claim nothing may be written.
		{"plain token: status of a VMI on node-a", func() error { return updateStatus(ctx, plain, "vmi-a", synced) }, deny(pv, "has no node claim")},
		{"plain token: heartbeat of node-a", func() error { return beat(ctx, plain, nodeA) }, deny(pn, "has no node claim")},
		{"plain token: event", func() error {
			_, err := plain.kube.CoreV1().Events(tenant).Create(ctx, coreEvent("plain", component, nodeA, onVMIA), metav1.CreateOptions{})
			return err
		}, deny(pe, "has no node claim")},
		{"unscheduled Pod's token: status of a VMI on node-a", func() error { return updateStatus(ctx, unscheduled, "vmi-a", synced) }, deny(pv, "has no node claim")},
		{"unscheduled Pod's token: heartbeat of node-a", func() error { return beat(ctx, unscheduled, nodeA) }, deny(pn, "has no node claim")},

		// Reads are not admission's business: RBAC lets every token read.
		{"read a VMI on node-b", func() error {
			_, err := agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Get(ctx, "vmi-b", metav1.GetOptions{})
			return err
		}, ok},
		{"plain token: list VMIs", func() error {
			l, err := plain.kemu.KemuV1alpha1().VirtualMachineInstances("").List(ctx, metav1.ListOptions{})
			if err == nil && len(l.Items) != 4 {
				err = fmt.Errorf("listed %d VMIs, want 4 (vmi-a, vmi-b, vmi-pending, vmi-m)", len(l.Items))
			}
			return err
		}, ok},
		{"list launcher Pods of its node", func() error {
			_, err := agentA.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeA})
			return err
		}, ok},
	}
	t.Run("node agent writes", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { check(t, tc.do(), tc.want) })
		}
		// What was allowed landed.
		n, err := admin.CoreV1().Nodes().Get(ctx, nodeA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels[v1.NodeSchedulableLabel] != "false" || n.Annotations[v1.NodeHeartbeatAnnotation] == "" || n.Labels["topology.kubernetes.io/zone"] != "z1" || n.Spec.Unschedulable {
			t.Errorf("node-a after the agent's writes: labels %v annotations %v unschedulable %v", n.Labels, n.Annotations, n.Spec.Unschedulable)
		}
		if n, err := admin.CoreV1().Nodes().Get(ctx, nodeB, metav1.GetOptions{}); err != nil || n.Labels[v1.NodeSchedulableLabel] != "" {
			t.Errorf("node-b got labels from node-a's agent: %v %v", n.Labels, err)
		}
		for name, node := range map[string]string{"vmi-a": nodeA, "vmi-b": nodeB, "vmi-pending": ""} {
			vmi, err := kemuAdmin.KemuV1alpha1().VirtualMachineInstances(tenant).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if vmi.Status.NodeName != node {
				t.Errorf("%s on %q, want %q", name, vmi.Status.NodeName, node)
			}
		}
	})

	// Other users are not the policy's business: a tenant's ServiceAccount
	// that may patch VMIs patches one on node-b.
	t.Run("other users unaffected", func(t *testing.T) {
		if _, err := admin.CoreV1().ServiceAccounts(tenant).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "editor"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "vmi-editor", Namespace: tenant},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1.SchemeGroupVersion.Group}, Resources: []string{"virtualmachineinstances"}, Verbs: []string{"get", "patch"}}}}
		if _, err := admin.RbacV1().Roles(tenant).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "vmi-editor", Namespace: tenant},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "vmi-editor"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "editor", Namespace: tenant}}}
		if _, err := admin.RbacV1().RoleBindings(tenant).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		out, _, err := c.Kubectl("-n", tenant, "create", "token", "editor")
		if err != nil {
			t.Fatal(err)
		}
		editor := newClient(t, c, strings.TrimSpace(out))
		err = cluster.Poll(ctx, func() error { return softRebootDone(ctx, editor, "vmi-b") })
		check(t, err, ok)
	})

	// RBAC grants no create or delete; the policy refuses them as well, so
	// a wider ClusterRole bound to the agent later reaches no further.
	t.Run("wider RBAC, same reach", func(t *testing.T) {
		wide := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "nodeagent-policy-test-wide"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1.SchemeGroupVersion.Group}, Resources: []string{"virtualmachineinstances"}, Verbs: []string{"create", "delete"}},
			{APIGroups: []string{v1.SchemeGroupVersion.Group}, Resources: []string{"virtualmachineinstances/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"delete"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"}},
		}}
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, wide, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: wide.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: wide.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{}) //nolint:errcheck // cleanup
		// The binding reaches the authorizer's cache within moments.
		err := cluster.Poll(ctx, func() error {
			err := agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Delete(ctx, "vmi-a", metav1.DeleteOptions{})
			if err != nil && strings.Contains(err.Error(), "'"+pv+"'") {
				return nil
			}
			return fmt.Errorf("delete vmi-a: %v", err)
		})
		if err != nil {
			t.Fatal(err)
		}
		newVMI := vmis["vmi-a"].DeepCopy()
		newVMI.ObjectMeta = metav1.ObjectMeta{Name: "vmi-new", Namespace: tenant}
		for _, tc := range []struct {
			name string
			do   func() error
			want expect
		}{
			{"patch the status of a VMI on its node", func() error {
				_, err := agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Patch(ctx, "vmi-a", types.MergePatchType, []byte(`{"status":{"reason":"x"}}`), metav1.PatchOptions{}, "status")
				return err
			}, ok},
			{"patch node-b's VMI's status", func() error {
				_, err := agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Patch(ctx, "vmi-b", types.MergePatchType, []byte(`{"status":{"reason":"x"}}`), metav1.PatchOptions{}, "status")
				return err
			}, deny(pv, "(not UPDATE VMI tenant/vmi-b)")},
			{"delete a VMI on its node", func() error {
				return agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Delete(ctx, "vmi-a", metav1.DeleteOptions{})
			}, deny(pv, "(not DELETE VMI tenant/vmi-a)")},
			{"create a VMI", func() error {
				_, err := agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Create(ctx, newVMI, metav1.CreateOptions{})
				return err
			}, deny(pv, "(not CREATE VMI tenant/vmi-new)")},
			{"delete its node", func() error { return agentA.kube.CoreV1().Nodes().Delete(ctx, nodeA, metav1.DeleteOptions{}) }, deny(pn, "not DELETE Node node-a")},
			{"create a node", func() error {
				_, err := agentA.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}, metav1.CreateOptions{})
				return err
			}, deny(pn, "not CREATE Node node-c")},
			{"status of its node", func() error {
				return mergePatchNode(ctx, agentA, nodeA, map[string]any{"status": map[string]any{"capacity": map[string]string{"example.com/x": "1"}}}, "status")
			}, deny(pn, "not UPDATE Node node-a/status")},
			{"delete the controller's event", func() error {
				return agentA.kube.CoreV1().Events(tenant).Delete(ctx, ctrlEvent.Name, metav1.DeleteOptions{})
			}, deny(pe, "may not DELETE events")},
			{"delete its own event", func() error {
				return agentA.kube.CoreV1().Events(tenant).Delete(ctx, "from-agent-a", metav1.DeleteOptions{})
			}, deny(pe, "may not DELETE events")},
			{"events.k8s.io event from itself", func() error {
				e := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev-own", Namespace: tenant}, EventTime: metav1.NowMicro(),
					ReportingController: component, ReportingInstance: nodeA, Action: "Test", Reason: "PolicyTest", Type: "Normal", Regarding: onVMIA}
				_, err := agentA.kube.EventsV1().Events(tenant).Create(ctx, e, metav1.CreateOptions{})
				return err
			}, ok},
			{"events.k8s.io event posing as node-b", func() error {
				e := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev-b", Namespace: tenant}, EventTime: metav1.NowMicro(),
					ReportingController: component, ReportingInstance: nodeB, Action: "Test", Reason: "PolicyTest", Type: "Normal", Regarding: onVMIA}
				_, err := agentA.kube.EventsV1().Events(tenant).Create(ctx, e, metav1.CreateOptions{})
				return err
			}, deny(pe, "host node-a")},
		} {
			t.Run(tc.name, func(t *testing.T) { check(t, tc.do(), tc.want) })
		}
	})

	// The node agent's recorder (nodeagent/vmi.NewRecorder, client-go's
	// tools/record): the event is created, and its repeat is a patch of
	// the count. Both pass.
	t.Run("recorder", func(t *testing.T) {
		rec, stop, err := nodeagentvmi.NewRecorder(ctx, agentA.kube, nodeA)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		rec.Event(vmis["vmi-a"], corev1.EventTypeNormal, "RecorderTest", "first")
		err = cluster.Poll(ctx, func() error {
			l, err := admin.CoreV1().Events(tenant).List(ctx, metav1.ListOptions{FieldSelector: "reason=RecorderTest"})
			if err != nil || len(l.Items) != 1 {
				return fmt.Errorf("events %v %v", l, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		rec.Event(vmis["vmi-a"], corev1.EventTypeNormal, "RecorderTest", "first")
		err = cluster.Poll(ctx, func() error {
			l, err := admin.CoreV1().Events(tenant).List(ctx, metav1.ListOptions{FieldSelector: "reason=RecorderTest"})
			if err != nil || len(l.Items) != 1 || l.Items[0].Count != 2 {
				return fmt.Errorf("events %v %v", l, err)
			}
			e := l.Items[0]
			t.Logf("event %s: count %d, source %s/%s, reporting %s/%s", e.Name, e.Count, e.Source.Component, e.Source.Host, e.ReportingController, e.ReportingInstance)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	// What the policy costs a write: the heartbeat's Node patch and a VMI
	// status update with it, then without the binding.
	t.Run("cost", func(t *testing.T) {
		const n = 100
		measure := func() (beatMedian, statusMedian time.Duration) {
			var b, s []time.Duration
			for range n {
				t0 := time.Now()
				if err := beat(ctx, agentA, nodeA); err != nil {
					t.Fatal(err)
				}
				b = append(b, time.Since(t0))
				vmi, err := agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).Get(ctx, "vmi-a", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				vmi.Status.Reason = fmt.Sprint(time.Now().UnixNano())
				t0 = time.Now()
				if _, err := agentA.kemu.KemuV1alpha1().VirtualMachineInstances(tenant).UpdateStatus(ctx, vmi, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				s = append(s, time.Since(t0))
			}
			slices.Sort(b)
			slices.Sort(s)
			return b[n/2], s[n/2]
		}
		withB, withS := measure()
		// kube-apiserver's own account: it times only the evaluations that
		// refused (or failed), every refusal of the test so far.
		raw, err := admin.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{pv, pn, pe} {
			sum, count := metric(string(raw), "apiserver_validating_admission_policy_check_duration_seconds", p)
			if count == 0 {
				t.Errorf("no refusals by %s in kube-apiserver's metrics", p)
				continue
			}
			t.Logf("%s: %d refusals, mean evaluation %s", p, int(count), time.Duration(sum/count*float64(time.Second)).Round(time.Microsecond))
		}
		for _, p := range []string{pn, pv} {
			if err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, sh.bindings[p].Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		err = cluster.Poll(ctx, func() error {
			if err := beat(ctx, agentA, nodeB); err != nil {
				return errors.New("the policy still refuses node-b's heartbeat")
			}
			if err := updateStatus(ctx, agentA, "vmi-b", synced); err != nil {
				return errors.New("the policy still refuses node-b's VMI")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		withoutB, withoutS := measure()
		t.Logf("median of %d, with the policy / without: Node heartbeat patch %s / %s, VMI UpdateStatus %s / %s",
			n, withB.Round(10*time.Microsecond), withoutB.Round(10*time.Microsecond), withS.Round(10*time.Microsecond), withoutS.Round(10*time.Microsecond))
	})
}

// metric sums the _sum and _count series of a histogram over every label
// set that names policy, from Prometheus text.
func metric(text, name, policy string) (sum, count float64) {
	for _, l := range strings.Split(text, "\n") {
		if !strings.Contains(l, `policy="`+policy+`"`) {
			continue
		}
		var v float64
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		if _, err := fmt.Sscan(f[len(f)-1], &v); err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(l, name+"_sum{"):
			sum += v
		case strings.HasPrefix(l, name+"_count{"):
			count += v
		}
	}
	return sum, count
}

// typeWarnings drops, from the type checker's warnings, the sections for
// events.k8s.io/v1 Event: the checker maps a rule's group "" to any group,
// so it also checks the core v1 events policy against events.k8s.io's
// schema, while at run time Equivalent matching hands it core v1 objects
// (the events.k8s.io cases of the test prove it).
func typeWarnings(ws []admissionv1.ExpressionWarning) []string {
	var out []string
	for _, w := range ws {
		var sec []string
		keep := true // text before any GVK is kept
		flush := func() {
			if keep && strings.TrimSpace(strings.Join(sec, "")) != "" {
				out = append(out, w.FieldRef+": "+strings.Join(sec, "\n"))
			}
			sec = nil
		}
		for _, l := range strings.Split(w.Warning, "\n") {
			if m := gvkLine.FindStringSubmatch(l); m != nil {
				flush()
				keep = m[1] != "events.k8s.io/v1, Kind=Event"
			}
			sec = append(sec, l)
		}
		flush()
	}
	return out
}

var gvkLine = regexp.MustCompile(`^([\w.]*/\w+, Kind=\w+): `)
