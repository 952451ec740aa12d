package migrationca

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/kemu-dev/kemu/kube/nodeapi"
)

// KemuAPIServiceAccount is kemu-api's ServiceAccount: the only requester
// of a client certificate, and only for ClientCommonName.
const KemuAPIServiceAccount = "kemu-api"

// ReasonApprovedClient is the approval reason of kemu-api's request.
const ReasonApprovedClient = "KemuAPIClientIdentity"

// ClientUsages a client certificate request asks for (ClientTemplate's):
// exactly these, in any order — no server auth.
var ClientUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}

// KemuAPIUser is the user name of kemu-api's ServiceAccount in namespace.
func KemuAPIUser(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + KemuAPIServiceAccount
}

// ClientTemplate is the identity of kemu-api's client certificate: CN
// nodeapi.ClientCommonName, no SANs, digital signature, client auth only.
func ClientTemplate() *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: nodeapi.ClientCommonName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// SignClient signs kemu-api's client certificate (ClientTemplate) for
// pub, valid from now for validity (NodeValidity when zero or longer),
// never beyond the CA. It returns the certificate's DER.
func (ca *CA) SignClient(pub crypto.PublicKey, now time.Time, validity time.Duration) ([]byte, error) {
	if validity <= 0 || validity > NodeValidity {
		validity = NodeValidity
	}
	der, err := ca.Sign(ClientTemplate(), pub, now, validity)
	if err != nil {
		return nil, fmt.Errorf("create the client certificate %q: %w", nodeapi.ClientCommonName, err)
	}
	return der, nil
}

// ReviewClientRequest decides a request of kemu-api's ServiceAccount
// (KemuAPIUser): the usages are exactly ClientUsages, the request a valid
// PEM x509 request with an ECDSA P-256 key, its subject only
// CN = nodeapi.ClientCommonName and no SANs at all. Otherwise a
// *ReviewError says why.
func ReviewClientRequest(csr *certificatesv1.CertificateSigningRequest, namespace string) (*x509.CertificateRequest, error) {
	spec := &csr.Spec
	if spec.SignerName != SignerName {
		return nil, refuse(ReasonBadRequest, "signer %q is not %s", spec.SignerName, SignerName)
	}
	if want := KemuAPIUser(namespace); spec.Username != want {
		return nil, refuse(ReasonNotNodeAgent, "requested by %q, only %s may ask for a client certificate", spec.Username, want)
	}
	if len(spec.Usages) != len(ClientUsages) || !containsAll(spec.Usages, ClientUsages) {
		return nil, refuse(ReasonUsages, "usages %q: want exactly %q", spec.Usages, ClientUsages)
	}
	req, err := parseRequest(spec.Request)
	if err != nil {
		return nil, err
	}
	if err := checkClientIdentity(req.Subject.Names, req.Subject.CommonName, len(req.DNSNames)+len(req.IPAddresses)+len(req.URIs)+len(req.EmailAddresses)); err != nil {
		return nil, err
	}
	return req, nil
}

// CheckClientCertificate checks that an issued certificate is kemu-api's
// client identity exactly (what kemu-api verifies besides the chain).
func CheckClientCertificate(cert *x509.Certificate) error {
	if err := checkClientIdentity(cert.Subject.Names, cert.Subject.CommonName, len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.URIs)+len(cert.EmailAddresses)); err != nil {
		return err
	}
	if cert.IsCA {
		return refuse(ReasonIdentity, "the client certificate is a CA")
	}
	if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		return refuse(ReasonUsages, "extended key usages %v: want client auth only", cert.ExtKeyUsage)
	}
	return nil
}

func checkClientIdentity(names []pkix.AttributeTypeAndValue, cn string, sans int) error {
	for _, n := range names {
		if !n.Type.Equal(oidCommonName) {
			return refuse(ReasonIdentity, "subject attribute %v: only CN=%s is allowed", n.Type, nodeapi.ClientCommonName)
		}
	}
	if cn != nodeapi.ClientCommonName || len(names) != 1 {
		return refuse(ReasonIdentity, "subject CN %q: want exactly CN=%s", cn, nodeapi.ClientCommonName)
	}
	if sans != 0 {
		return refuse(ReasonIdentity, "%d SANs: a client certificate has none", sans)
	}
	return nil
}

// Grant is what an approved request gets: a node certificate (Node set)
// or kemu-api's client certificate (Client).
type Grant struct {
	Node    string
	Client  bool
	Request *x509.CertificateRequest
}

// Review decides any request of signer SignerName: kemu-api's
// ServiceAccount by ReviewClientRequest, everyone else by ReviewRequest
// (the node rules, which refuse whoever is not the node agent).
func Review(csr *certificatesv1.CertificateSigningRequest, namespace string) (Grant, error) {
	if csr.Spec.Username == KemuAPIUser(namespace) {
		req, err := ReviewClientRequest(csr, namespace)
		return Grant{Client: err == nil, Request: req}, err
	}
	node, req, err := ReviewRequest(csr, namespace)
	return Grant{Node: node, Request: req}, err
}

// SignGrant signs what g grants with ca.
func (ca *CA) SignGrant(g Grant, now time.Time, validity time.Duration) ([]byte, error) {
	switch {
	case g.Request == nil:
		return nil, errors.New("sign: no request")
	case g.Client:
		return ca.SignClient(g.Request.PublicKey, now, validity)
	default:
		return ca.SignNode(g.Node, g.Request.PublicKey, now, validity)
	}
}
