package migrationca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/kemu-dev/kemu/kube/nodeapi"
)

// Names defined once for the controller, the node agent and deploy/.
const (
	// SignerName is the CertificateSigningRequest signer of node
	// certificates (spec.signerName).
	SignerName = "kemu.dev/migration"
	// SecretName is the CA Secret (ca.crt, ca.key) in kemu's namespace:
	// only the controller may read it.
	SecretName = "kemu-migration-ca"
	// ConfigMapName is the public CA bundle (ca.crt only) the controller
	// publishes in kemu's namespace for the node agents.
	ConfigMapName = "kemu-migration-ca"
	// NodeAgentServiceAccount is the node agent's ServiceAccount: the only
	// requester whose requests are approved.
	NodeAgentServiceAccount = "kemu-nodeagent"
	// NodeNameExtra is the user's extra key in which kube-apiserver records
	// the node of the Pod a ServiceAccount token is bound to
	// (ServiceAccountTokenPodNodeInfo); spec.extra of a request copies it.
	NodeNameExtra = "authentication.kubernetes.io/node-name"
)

// Usages a node certificate request asks for (NodeTemplate's): exactly
// these, in any order.
var Usages = []certificatesv1.KeyUsage{
	certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth,
}

// Reasons of a denied request (condition Denied, reason).
const (
	ReasonApproved     = "KemuMigrationNodeIdentity"
	ReasonNotNodeAgent = "NotNodeAgent"
	ReasonNoNodeClaim  = "NoNodeClaim"
	ReasonUsages       = "UsagesNotAllowed"
	ReasonBadRequest   = "InvalidRequest"
	ReasonKey          = "KeyNotAllowed"
	ReasonIdentity     = "IdentityNotAllowed"
)

// ReviewError is why a request is refused: a condition reason and a
// message.
type ReviewError struct{ Reason, Message string }

func (e *ReviewError) Error() string { return e.Reason + ": " + e.Message }

func refuse(reason, format string, args ...any) *ReviewError {
	return &ReviewError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// NodeAgentUser is the user name of the node agent's ServiceAccount in
// namespace.
func NodeAgentUser(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + NodeAgentServiceAccount
}

// oidCommonName is the only subject attribute a request may carry.
var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// ReviewRequest decides a node certificate request of signer SignerName
// by kemu installed in namespace. It returns the node and the parsed
// request when every rule holds:
//   - the requester is the node agent's ServiceAccount (NodeAgentUser);
//   - its token names exactly one node (spec.extra[NodeNameExtra]);
//   - the usages are exactly Usages;
//   - the request is a valid PEM x509 request with an ECDSA P-256 key
//     and a good self-signature;
//   - its subject is only CN = that node, its only SAN is DNS = that node
//     (no IP, URI or e-mail SANs), and that node is not
//     nodeapi.ClientCommonName (kemu-api's identity).
//
// Otherwise a *ReviewError says why.
func ReviewRequest(csr *certificatesv1.CertificateSigningRequest, namespace string) (string, *x509.CertificateRequest, error) {
	spec := &csr.Spec
	if spec.SignerName != SignerName {
		return "", nil, refuse(ReasonBadRequest, "signer %q is not %s", spec.SignerName, SignerName)
	}
	if want := NodeAgentUser(namespace); spec.Username != want {
		return "", nil, refuse(ReasonNotNodeAgent, "requested by %q, only %s may ask", spec.Username, want)
	}
	nodes := spec.Extra[NodeNameExtra]
	if len(nodes) != 1 || nodes[0] == "" {
		return "", nil, refuse(ReasonNoNodeClaim, "the requester's token names %d nodes %q (%s): want exactly one, a token bound to a node agent Pod", len(nodes), nodes, NodeNameExtra)
	}
	node := nodes[0]
	if len(spec.Usages) != len(Usages) || !containsAll(spec.Usages, Usages) {
		return "", nil, refuse(ReasonUsages, "usages %q: want exactly %q", spec.Usages, Usages)
	}
	req, err := parseRequest(spec.Request)
	if err != nil {
		return "", nil, err
	}
	if err := checkIdentity(req.Subject.Names, req.Subject.CommonName, req.DNSNames, len(req.IPAddresses)+len(req.URIs)+len(req.EmailAddresses), node); err != nil {
		return "", nil, err
	}
	return node, req, nil
}

// parseRequest parses spec.request: exactly one PEM x509 request with a
// good self-signature and an ECDSA P-256 key.
func parseRequest(pemData []byte) (*x509.CertificateRequest, error) {
	block, rest := pem.Decode(pemData)
	if block == nil || block.Type != "CERTIFICATE REQUEST" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, refuse(ReasonBadRequest, "spec.request is not one PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, refuse(ReasonBadRequest, "parse the request: %v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, refuse(ReasonBadRequest, "the request's signature: %v", err)
	}
	if pub, ok := req.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		return nil, refuse(ReasonKey, "key %T: want ECDSA P-256", req.PublicKey)
	}
	return req, nil
}

// CheckNodeCertificate checks that an issued certificate carries node's
// identity exactly (what a node agent verifies besides the chain).
func CheckNodeCertificate(cert *x509.Certificate, node string) error {
	if err := checkIdentity(cert.Subject.Names, cert.Subject.CommonName, cert.DNSNames, len(cert.IPAddresses)+len(cert.URIs)+len(cert.EmailAddresses), node); err != nil {
		return err
	}
	if cert.IsCA {
		return refuse(ReasonIdentity, "the certificate of node %q is a CA", node)
	}
	return nil
}

func checkIdentity(names []pkix.AttributeTypeAndValue, cn string, dns []string, otherSANs int, node string) error {
	if node == nodeapi.ClientCommonName {
		// No Node can have this name (a colon); never a node's identity.
		return refuse(ReasonIdentity, "%s is kemu-api's identity, never a node's", node)
	}
	for _, n := range names {
		if !n.Type.Equal(oidCommonName) {
			return refuse(ReasonIdentity, "subject attribute %v: only CN=%s is allowed", n.Type, node)
		}
	}
	if cn != node || len(names) != 1 {
		return refuse(ReasonIdentity, "subject CN %q: want exactly CN=%s, the requester's node", cn, node)
	}
	if !slices.Equal(dns, []string{node}) || otherSANs != 0 {
		return refuse(ReasonIdentity, "SANs DNS %q and %d others: want only DNS %s", dns, otherSANs, node)
	}
	return nil
}

func containsAll(have, want []certificatesv1.KeyUsage) bool {
	for _, u := range want {
		if !slices.Contains(have, u) {
			return false
		}
	}
	return true
}
