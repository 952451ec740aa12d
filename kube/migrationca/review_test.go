package migrationca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
)

const testNS = "kemu-system"

// request encodes a PEM certificate request of tmpl signed by key.
func request(t *testing.T, tmpl *x509.CertificateRequest, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return PEMBlock("CERTIFICATE REQUEST", der)
}

func TestReviewRequest(t *testing.T) {
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := func() *x509.CertificateRequest {
		return &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a"}, DNSNames: []string{"node-a"}}
	}
	with := func(f func(*x509.CertificateRequest)) *x509.CertificateRequest {
		r := good()
		f(r)
		return r
	}
	base := func(req []byte) certificatesv1.CertificateSigningRequestSpec {
		return certificatesv1.CertificateSigningRequestSpec{
			SignerName: SignerName, Request: req, Usages: Usages,
			Username: NodeAgentUser(testNS),
			Extra:    map[string]certificatesv1.ExtraValue{NodeNameExtra: {"node-a"}},
		}
	}
	goodReq := request(t, good(), p256)
	tests := []struct {
		name string
		edit func(*certificatesv1.CertificateSigningRequestSpec)
		want string // "" approved
	}{
		{"node agent of node-a for node-a", nil, ""},
		{"usages in another order", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
		}, ""},
		{"another signer", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.SignerName = "kubernetes.io/kube-apiserver-client"
		}, ReasonBadRequest},
		{"another ServiceAccount", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Username = "system:serviceaccount:kemu-system:default"
		}, ReasonNotNodeAgent},
		{"node agent SA of another namespace", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Username = NodeAgentUser("evil") }, ReasonNotNodeAgent},
		{"a node (kubelet)", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Username = "system:node:node-a" }, ReasonNotNodeAgent},
		{"no node claim", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Extra = nil }, ReasonNoNodeClaim},
		{"empty node claim", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Extra[NodeNameExtra] = []string{""} }, ReasonNoNodeClaim},
		{"two node names", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Extra[NodeNameExtra] = []string{"node-a", "node-b"}
		}, ReasonNoNodeClaim},
		{"CN of another node", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.Subject.CommonName = "node-b"; r.DNSNames = []string{"node-b"} }), p256)
		}, ReasonIdentity},
		{"claim of another node", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Extra[NodeNameExtra] = []string{"node-b"} }, ReasonIdentity},
		{"extra DNS SAN", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.DNSNames = append(r.DNSNames, "node-b") }), p256)
		}, ReasonIdentity},
		{"no DNS SAN", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.DNSNames = nil }), p256)
		}, ReasonIdentity},
		{"IP SAN", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.IPAddresses = []net.IP{net.IPv4(10, 0, 0, 1)} }), p256)
		}, ReasonIdentity},
		{"e-mail SAN", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.EmailAddresses = []string{"a@b.c"} }), p256)
		}, ReasonIdentity},
		{"organization in the subject", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = request(t, with(func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"system:masters"} }), p256)
		}, ReasonIdentity},
		{"usage missing", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
		}, ReasonUsages},
		{"usage added", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Usages = append([]certificatesv1.KeyUsage{certificatesv1.UsageCertSign}, Usages...)
		}, ReasonUsages},
		{"usage replaced", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageCodeSigning}
		}, ReasonUsages},
		{"RSA key", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Request = request(t, good(), rsaKey) }, ReasonKey},
		{"P-384 key", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Request = request(t, good(), p384) }, ReasonKey},
		{"not PEM", func(s *certificatesv1.CertificateSigningRequestSpec) { s.Request = []byte("node-a") }, ReasonBadRequest},
		{"a certificate, not a request", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = PEMBlock("CERTIFICATE", newTestCA(t).Cert.Raw)
		}, ReasonBadRequest},
		{"two requests", func(s *certificatesv1.CertificateSigningRequestSpec) {
			s.Request = append(append([]byte{}, goodReq...), request(t, with(func(r *x509.CertificateRequest) { r.Subject.CommonName = "node-b" }), p256)...)
		}, ReasonBadRequest},
		{"bad signature", func(s *certificatesv1.CertificateSigningRequestSpec) {
			der := request(t, good(), p256)
			raw := decodePEM(t, der)
			raw[len(raw)-3] ^= 0xff
			s.Request = PEMBlock("CERTIFICATE REQUEST", raw)
		}, ReasonBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := base(goodReq)
			if tt.edit != nil {
				tt.edit(&spec)
			}
			node, req, err := ReviewRequest(&certificatesv1.CertificateSigningRequest{Spec: spec}, testNS)
			if tt.want == "" {
				if err != nil || node != "node-a" || req == nil {
					t.Fatalf("refused: %v (node %q)", err, node)
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

func decodePEM(t *testing.T, b []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("no PEM block")
	}
	return block.Bytes
}

// SignNode issues NodeTemplate's identity, which CheckNodeCertificate
// accepts for its node only, capped to the validity asked and the CA's.
func TestSignNode(t *testing.T) {
	ca := newTestCA(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	for _, tt := range []struct {
		validity, want time.Duration
	}{{0, NodeValidity}, {time.Hour, time.Hour}, {2 * NodeValidity, NodeValidity}} {
		der, err := ca.SignNode("node-a", &key.PublicKey, now, tt.validity)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		if got := cert.NotAfter.Sub(cert.NotBefore) - ClockSkew; got.Round(time.Second) != tt.want {
			t.Errorf("validity %v: got %v, want %v", tt.validity, got, tt.want)
		}
		if err := CheckNodeCertificate(cert, "node-a"); err != nil {
			t.Error(err)
		}
		if err := CheckNodeCertificate(cert, "node-b"); err == nil {
			t.Error("node-a's certificate passes for node-b")
		}
	}
	if err := CheckNodeCertificate(ca.Cert, "kemu-migration-ca"); err == nil {
		t.Error("the CA passes as a node certificate")
	}
	if _, err := ca.SignNode("", &key.PublicKey, now, 0); err == nil {
		t.Error("signed an empty node name")
	}
}
