//go:build cluster

package migrationcert_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	controllercert "github.com/kemu-dev/kemu/controller/migrationcert"
	"github.com/kemu-dev/kemu/kube/migrationca"
	nodecert "github.com/kemu-dev/kemu/nodeagent/migrationcert"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
	"github.com/kemu-dev/kemu/test/cluster"
)

const (
	// ns is where deploy/kustomization.yaml puts kemu.
	ns           = "kemu-system"
	nodeA, nodeB = "node-a", "node-b"
	testUID      = "0b6c7a52-6f1e-4d7e-9a43-1c2f5e0d9a77"
)

// token is a ServiceAccount token as an operator would ask for one
// (extra args: the bound object).
func token(t *testing.T, c *cluster.Cluster, sa string, args ...string) kubernetes.Interface {
	t.Helper()
	out, _, err := c.Kubectl(append([]string{"-n", ns, "create", "token", sa, "--duration=15m"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: c.Host, BearerToken: strings.TrimSpace(out), TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert}}
	cl, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestMigrationCertificates(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Start(context.Background(), cluster.Options{
		ServiceAccountAdmission: true,
		ControllerManager:       true,
		ControllerManagerArgs:   []string{"--controllers=serviceaccount-controller"},
		Logf:                    t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	// kemu as a user installs it (RBAC, policies); no kubelet runs its Pods.
	if _, _, err := c.Kubectl("apply", "-k", filepath.Join(root, "deploy")); err != nil {
		t.Fatal(err)
	}
	// Node agent Pods as the DaemonSet makes them, bound to node-a and
	// node-b (they never run): their tokens carry the node claim.
	for name, node := range map[string]string{"agent-a": nodeA, "agent-b": nodeB} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{ServiceAccountName: migrationca.NodeAgentServiceAccount, NodeName: node,
				Containers: []corev1.Container{{Name: "nodeagent", Image: "kemu.local/kemu-nodeagent:latest"}}},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agentA := token(t, c, migrationca.NodeAgentServiceAccount, "--bound-object-kind=Pod", "--bound-object-name=agent-a")
	agentB := token(t, c, migrationca.NodeAgentServiceAccount, "--bound-object-kind=Pod", "--bound-object-name=agent-b")
	unbound := token(t, c, migrationca.NodeAgentServiceAccount)
	controllerClient := token(t, c, "kemu-controller")

	// The signer, as kemu-controller runs it (its ServiceAccount's RBAC).
	signer, err := controllercert.New(controllercert.Config{Client: controllerClient, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopSigner := context.WithCancel(ctx)
	signerDone := make(chan error, 1)
	go func() { signerDone <- signer.Run(sctx, 2) }()
	defer func() {
		stopSigner()
		if err := <-signerDone; err != nil {
			t.Error(err)
		}
	}()

	// Two node agents' proxies.
	proxies := map[string]*nodecert.Proxy{}
	for node, cl := range map[string]kubernetes.Interface{nodeA: agentA, nodeB: agentB} {
		p, err := nodecert.NewProxy(nodecert.Config{Client: cl, NodeName: node, Namespace: ns}, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(pctx) }()
		defer func() {
			stop()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		proxies[node] = p
	}
	for node, p := range proxies {
		select {
		case <-p.Ready():
		case <-ctx.Done():
			t.Fatalf("%s: no certificate: %v", node, ctx.Err())
		}
		leaf := p.Store().Current().Leaf()
		if leaf.Subject.CommonName != node || p.Store().Current().Node != node {
			t.Errorf("%s: certificate of %q", node, leaf.Subject.CommonName)
		}
		if err := migrationca.CheckNodeCertificate(leaf, node); err != nil {
			t.Error(err)
		}
	}

	t.Run("the CA key stays with the controller", func(t *testing.T) {
		_, err := agentA.CoreV1().Secrets(ns).Get(ctx, migrationca.SecretName, metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("node agent reads the CA Secret: %v", err)
		}
		cm, err := agentA.CoreV1().ConfigMaps(ns).Get(ctx, migrationca.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(cm.Data) != 1 || strings.Contains(cm.Data[migrationca.CACertKey], "PRIVATE KEY") {
			t.Errorf("published bundle holds %d keys or a private key", len(cm.Data))
		}
	})

	t.Run("used requests are deleted", func(t *testing.T) {
		err := cluster.Poll(ctx, func() error {
			l, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("spec.signerName", migrationca.SignerName).String()})
			if err != nil {
				return err
			}
			if len(l.Items) != 0 {
				return errors.New(l.Items[0].Name + " is left")
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})

	t.Run("node-a's proxy reaches node-b's", func(t *testing.T) {
		// node-b's launcher socket: echoes.
		sock := filepath.Join(t.TempDir(), "main.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer conn.Close(); _, _ = io.Copy(conn, conn) }()
			}
		}()
		b := proxies[nodeB].Server()
		if err := b.Register(testUID, nodeA, map[string]string{migrationproxy.ChannelMain: sock}); err != nil {
			t.Fatal(err)
		}
		defer b.Unregister(testUID)
		conn, err := migrationproxy.Dial(ctx, proxies[nodeA].Store(), migrationproxy.Target{Addr: b.Addr().String(), Node: nodeB}, testUID, migrationproxy.ChannelMain)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte("ram")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 3)
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != "ram" {
			t.Fatalf("echo %q, %v", got, err)
		}
		// node-b, not the migration's source, is refused.
		if _, err := migrationproxy.Dial(ctx, proxies[nodeB].Store(), migrationproxy.Target{Addr: b.Addr().String(), Node: nodeB}, testUID, migrationproxy.ChannelMain); err == nil {
			t.Error("node-b opened node-a's migration")
		}
	})

	t.Run("requests for another node are denied", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			cl     kubernetes.Interface
			node   string
			reason string
		}{
			{"node-a's agent for node-b", agentA, nodeB, migrationca.ReasonIdentity},
			{"a token bound to no Pod", unbound, nodeA, migrationca.ReasonNoNodeClaim},
			{"an administrator (not the node agent)", admin, nodeA, migrationca.ReasonNotNodeAgent},
		} {
			_, err := nodecert.Request(ctx, nodecert.Config{Client: tc.cl, NodeName: tc.node, Namespace: ns, RequestTimeout: time.Minute})
			if err == nil || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("%s: %v, want denied with reason %s", tc.name, err, tc.reason)
			}
		}
	})

	t.Run("kemu-api's client identity", func(t *testing.T) { testKemuAPIIdentity(ctx, t, c, admin, agentA) })

	t.Run("an approval by someone else is not signed beyond the rules", func(t *testing.T) {
		// An administrator approves node-a's agent's request for node-b
		// before the signer decides: the signer marks it Failed.
		req := mustRequest(t, nodeB)
		stopSigner()
		<-signerDone
		signerDone <- nil
		created, err := agentA.CertificatesV1().CertificateSigningRequests().Create(ctx, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Conditions = append(created.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "AdminSaysSo"})
		if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, created.Name, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		signer2, err := controllercert.New(controllercert.Config{Client: controllerClient, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		s2ctx, stop2 := context.WithCancel(ctx)
		defer stop2()
		go func() { _ = signer2.Run(s2ctx, 1) }()
		err = cluster.Poll(ctx, func() error {
			got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, created.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(got.Status.Certificate) > 0 {
				return cluster.StopPolling{Err: errors.New("signed a request for another node")}
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == certificatesv1.CertificateFailed && cond.Reason == migrationca.ReasonIdentity {
					return nil
				}
			}
			return errors.New("not failed yet")
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// mustRequest is a request of signer kemu.dev/migration for node's
// identity (as nodeagent/migrationcert makes it).
func mustRequest(t *testing.T, node string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: node}, DNSNames: []string{node}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: migrationca.PEMBlock("CERTIFICATE REQUEST", der), SignerName: migrationca.SignerName, Usages: migrationca.Usages},
	}
}
