package migrationca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/kemu-dev/kemu/kube/nodeapi"
)

// Review approves kemu-api's ServiceAccount for exactly ClientCommonName,
// client auth only, and nothing else from it; the node rules stay as they
// are, so a node agent never gets ClientCommonName.
func TestReviewClient(t *testing.T) {
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	good := func() *x509.CertificateRequest {
		return &x509.CertificateRequest{Subject: pkix.Name{CommonName: nodeapi.ClientCommonName}}
	}
	with := func(f func(*x509.CertificateRequest)) *x509.CertificateRequest {
		r := good()
		f(r)
		return r
	}
	base := func() certificatesv1.CertificateSigningRequestSpec {
		return certificatesv1.CertificateSigningRequestSpec{
			SignerName: SignerName, Request: request(t, good(), p256), Usages: ClientUsages,
			Username: KemuAPIUser(testNS),
		}
	}
	u := func(us ...certificatesv1.KeyUsage) []certificatesv1.KeyUsage { return us }
	tests := []struct {
		name   string
		edit   func(*certificatesv1.CertificateSigningRequestSpec)
		client bool   // approved as kemu-api's client certificate
		want   string // "" approved
	}{
		{"kemu-api for its client identity", nil, true, ""},
		{"usages in another order", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Usages = u(certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature)
		}, true, ""},
		{"kemu-api bound to a Pod on a node", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Extra = map[string]certificatesv1.ExtraValue{NodeNameExtra: {"node-a"}}
		}, true, ""},
		{"kemu-api asks for server auth too", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Usages = Usages }, false, ReasonUsages},
		{"kemu-api asks for server auth only", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Usages = u(certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth)
		}, false, ReasonUsages},
		{"kemu-api without digital signature", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Usages = u(certificatesv1.UsageClientAuth)
		}, false, ReasonUsages},
		{"kemu-api asks for a node's name", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a"}, DNSNames: []string{"node-a"}}, p256)
		}, false, ReasonIdentity},
		{"kemu-api with a DNS SAN", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.DNSNames = []string{"kemu-api"} }), p256)
		}, false, ReasonIdentity},
		{"kemu-api with an IP SAN", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.IPAddresses = []net.IP{net.IPv4(10, 0, 0, 1)} }), p256)
		}, false, ReasonIdentity},
		{"kemu-api with a URI SAN", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.URIs = []*url.URL{{Scheme: "spiffe", Host: "x"}} }), p256)
		}, false, ReasonIdentity},
		{"kemu-api with an organization", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"system:masters"} }), p256)
		}, false, ReasonIdentity},
		{"kemu-api with a P-384 key", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Request = request(t, good(), p384) }, false, ReasonKey},
		{"kemu-api with another signer", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.SignerName = "kubernetes.io/kube-apiserver-client"
		}, false, ReasonBadRequest},
		{"kemu-api of another namespace", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Username = KemuAPIUser("evil") }, false, ReasonNotNodeAgent},
		{"another ServiceAccount for the client identity", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Username = "system:serviceaccount:" + testNS + ":default"
		}, false, ReasonNotNodeAgent},
		{"the node agent of node-a for the client identity, client usages", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Username = NodeAgentUser(testNS)
			s.Extra = map[string]certificatesv1.ExtraValue{NodeNameExtra: {"node-a"}}
		}, false, ReasonUsages},
		{"the node agent of node-a for the client identity, node usages", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Username = NodeAgentUser(testNS)
			s.Extra = map[string]certificatesv1.ExtraValue{NodeNameExtra: {"node-a"}}
			s.Usages = Usages
		}, false, ReasonIdentity},
		{"a node agent whose node claim is the client identity", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Username = NodeAgentUser(testNS)
			s.Extra = map[string]certificatesv1.ExtraValue{NodeNameExtra: {nodeapi.ClientCommonName}}
			s.Usages = Usages
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.DNSNames = []string{nodeapi.ClientCommonName} }), p256)
		}, false, ReasonIdentity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := base()
			if tt.edit != nil {
				tt.edit(&spec)
			}
			g, err := Review(&certificatesv1.CertificateSigningRequest{Spec: spec}, testNS)
			if tt.want == "" {
				if err != nil || g.Client != tt.client || g.Node != "" || g.Request == nil {
					t.Fatalf("refused or wrong grant: %v (%+v)", err, g)
				}
				return
			}
			var re *ReviewError
			if !errors.As(err, &re) || re.Reason != tt.want {
				t.Fatalf("got %v, want reason %s", err, tt.want)
			}
		})
	}
}

// SignClient (and Sign of a client grant) issues ClientTemplate's
// identity, which CheckClientCertificate accepts and CheckNodeCertificate
// refuses; a node certificate fails CheckClientCertificate.
func TestSignClient(t *testing.T) {
	ca := newTestCA(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	der, err := ca.SignGrant(Grant{Client: true, Request: &x509.CertificateRequest{PublicKey: &key.PublicKey}}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckClientCertificate(cert); err != nil {
		t.Error(err)
	}
	if got := cert.NotAfter.Sub(cert.NotBefore) - ClockSkew; got.Round(time.Second) != time.Hour {
		t.Errorf("validity %v", got)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("the client certificate verifies for server auth")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Error(err)
	}
	if err := CheckNodeCertificate(cert, nodeapi.ClientCommonName); err == nil {
		t.Error("the client certificate passes as a node certificate")
	}
	nodeDER, err := ca.SignGrant(Grant{Node: "node-a", Request: &x509.CertificateRequest{PublicKey: &key.PublicKey}}, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, _ := x509.ParseCertificate(nodeDER)
	if err := CheckClientCertificate(nodeCert); err == nil {
		t.Error("a node certificate passes as kemu-api's client certificate")
	}
	if _, err := ca.SignGrant(Grant{Client: true}, now, 0); err == nil {
		t.Error("signed without a request")
	}
}
