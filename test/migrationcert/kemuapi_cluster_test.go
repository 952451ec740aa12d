//go:build cluster

package migrationcert_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/kube/certrequest"
	"github.com/kemu-dev/kemu/kube/migrationca"
	"github.com/kemu-dev/kemu/kube/nodeapi"
	"github.com/kemu-dev/kemu/test/cluster"
)

// kemuAPIRequest is kemu-api's request for its client certificate.
func kemuAPIRequest(cl kubernetes.Interface, usages []certificatesv1.KeyUsage) certrequest.Config {
	return certrequest.Config{Client: cl, Namespace: ns, GenerateName: "kemu-api-", CommonName: nodeapi.ClientCommonName,
		Usages: usages, RequestTimeout: time.Minute}
}

// testKemuAPIIdentity: kemu-api's ServiceAccount gets its client
// certificate from the controller's signer; a node agent asking for
// ClientCommonName, and kemu-api asking for more, are denied.
func testKemuAPIIdentity(ctx context.Context, t *testing.T, c *cluster.Cluster, admin, agentA kubernetes.Interface) {
	// kemu-api's ServiceAccount (deploy/ makes it when the test applied
	// it) with only what it needs to ask.
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: migrationca.KemuAPIServiceAccount}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-kemu-api-csr"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{migrationca.ConfigMapName}, Verbs: []string{"get"}},
	}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: migrationca.KemuAPIServiceAccount, Namespace: ns}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kemuAPI := token(t, c, migrationca.KemuAPIServiceAccount)

	got, err := certrequest.Request(ctx, kemuAPIRequest(kemuAPI, migrationca.ClientUsages))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(decodeCert(t, got.CertPEM))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrationca.CheckClientCertificate(cert); err != nil {
		t.Error(err)
	}
	cas, err := migrationca.ParseCerts(got.CABundle)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kemu-api's certificate does not chain to the bundle: %v", err)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&got.Key.PublicKey) {
		t.Error("the certificate is not for kemu-api's key")
	}

	for _, tc := range []struct {
		name   string
		cfg    certrequest.Config
		reason string
	}{
		{"kemu-api with server auth", kemuAPIRequest(kemuAPI, migrationca.Usages), migrationca.ReasonUsages},
		{"node-a's agent for the client identity", kemuAPIRequest(agentA, migrationca.ClientUsages), migrationca.ReasonUsages},
		{"node-a's agent for the client identity, node usages", kemuAPIRequest(agentA, migrationca.Usages), migrationca.ReasonIdentity},
		{"kemu-api for node-a", certrequest.Config{Client: kemuAPI, Namespace: ns, GenerateName: "kemu-api-", CommonName: nodeA,
			DNSNames: []string{nodeA}, Usages: migrationca.ClientUsages, RequestTimeout: time.Minute}, migrationca.ReasonIdentity},
	} {
		_, err := certrequest.Request(ctx, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: %v, want denied with reason %s", tc.name, err, tc.reason)
		}
	}
}

func decodeCert(t *testing.T, pemData []byte) []byte {
	t.Helper()
	certs, err := migrationca.ParseCerts(pemData)
	if err != nil || len(certs) != 1 {
		t.Fatalf("issued certificate: %d, %v", len(certs), err)
	}
	return certs[0].Raw
}
