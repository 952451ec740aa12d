package migrationproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/kemu-dev/kemu/kube/migrationca"
)

// Keys of the Secret-shaped data maps and validities: kube/migrationca's
// (the CA is shared with the controller, which signs node certificates).
const (
	CACertKey    = migrationca.CACertKey
	CAKeyKey     = migrationca.CAKeyKey
	TLSCertKey   = migrationca.TLSCertKey
	TLSKeyKey    = migrationca.TLSKeyKey
	CAValidity   = migrationca.CAValidity
	NodeValidity = migrationca.NodeValidity
)

// CA is kemu's migration certificate authority (kube/migrationca) with
// IssueNode, which makes a node's whole material in one process (tests and
// tools; in a cluster the controller signs each node agent's request).
type CA struct{ *migrationca.CA }

// NewCA generates a CA (ECDSA P-256) valid from now for CAValidity.
func NewCA(now time.Time) (*CA, error) {
	ca, err := migrationca.NewCA(now)
	if err != nil {
		return nil, err
	}
	return &CA{ca}, nil
}

// CAFromSecretData decodes the CA Secret's data (migrationca.CAFromSecretData).
func CAFromSecretData(data map[string][]byte) (*CA, error) {
	ca, err := migrationca.CAFromSecretData(data)
	if err != nil {
		return nil, err
	}
	return &CA{ca}, nil
}

// IssueNode issues the node's certificate (migrationca.NodeTemplate: ECDSA
// P-256, CN and DNS SAN the node name, server and client auth, valid from
// now for NodeValidity) and returns the node's material: the CA bundle and
// the node's key pair.
func (ca *CA) IssueNode(nodeName string, now time.Time) (*Material, error) {
	if nodeName == "" {
		return nil, errors.New("issue node certificate: empty node name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key for node %q: %w", nodeName, err)
	}
	der, err := ca.SignNode(nodeName, &key.PublicKey, now, NodeValidity)
	if err != nil {
		return nil, err
	}
	return NewMaterialFromKey(migrationca.EncodeCerts(ca.Bundle), migrationca.PEMBlock("CERTIFICATE", der), key)
}

// NewMaterialFromKey is NewMaterial with the node's key in memory.
func NewMaterialFromKey(caPEM, certPEM []byte, key *ecdsa.PrivateKey) (*Material, error) {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode node key: %w", err)
	}
	return NewMaterial(caPEM, certPEM, migrationca.PEMBlock("EC PRIVATE KEY", keyDER))
}

// Material is one node's TLS material: the trusted CAs and the node's own
// certificate and key. It is immutable; Store swaps whole Materials.
type Material struct {
	caPEM, certPEM, keyPEM []byte
	pool                   *x509.CertPool
	cert                   tls.Certificate
	// Node is the node name the certificate is issued to (its CN).
	Node string
}

// NewMaterial parses and checks PEM material: the key pair must match and
// the certificate must chain to one of the CAs for both server and client
// auth.
func NewMaterial(caPEM, certPEM, keyPEM []byte) (*Material, error) {
	cas, err := migrationca.ParseCerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("node key pair: %w", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("node certificate: %w", err)
		}
		pair.Leaf = leaf
	}
	opts := x509.VerifyOptions{
		Roots:       pool,
		CurrentTime: leaf.NotBefore.Add(migrationca.ClockSkew),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if _, err := leaf.Verify(opts); err != nil {
		return nil, fmt.Errorf("node certificate %q: %w", leaf.Subject.CommonName, err)
	}
	return &Material{caPEM: caPEM, certPEM: certPEM, keyPEM: keyPEM, pool: pool, cert: pair, Node: leaf.Subject.CommonName}, nil
}

// MaterialFromSecretData decodes a node's material from Secret-shaped
// data (ca.crt, tls.crt, tls.key).
func MaterialFromSecretData(data map[string][]byte) (*Material, error) {
	return NewMaterial(data[CACertKey], data[TLSCertKey], data[TLSKeyKey])
}

// SecretData encodes the material as Secret-shaped data (ca.crt,
// tls.crt, tls.key; no CA key).
func (m *Material) SecretData() map[string][]byte {
	return map[string][]byte{CACertKey: m.caPEM, TLSCertKey: m.certPEM, TLSKeyKey: m.keyPEM}
}

// Leaf is the node's certificate.
func (m *Material) Leaf() *x509.Certificate { return m.cert.Leaf }

// TLSCertificate is the node's certificate and key, for a TLS server of
// the node (the node agent's API) other than the proxy.
func (m *Material) TLSCertificate() *tls.Certificate { return &m.cert }

// CAPool is the trusted CA bundle.
func (m *Material) CAPool() *x509.CertPool { return m.pool }
