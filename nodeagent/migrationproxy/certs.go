package migrationproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the Secret-shaped data maps. The CA Secret holds CAKeyKey
// and CACertKey; a node's material holds CACertKey, TLSCertKey and
// TLSKeyKey (never the CA's key).
const (
	CACertKey  = corev1.ServiceAccountRootCAKey // "ca.crt"
	CAKeyKey   = "ca.key"
	TLSCertKey = corev1.TLSCertKey       // "tls.crt"
	TLSKeyKey  = corev1.TLSPrivateKeyKey // "tls.key"
)

// Validity of the certificates. Node certificates are issued in memory
// by each node agent from the CA Secret and re-issued on every reload,
// so they can be short; the CA lives in the Secret.
const (
	CAValidity   = 5 * 365 * 24 * time.Hour
	NodeValidity = 90 * 24 * time.Hour
	// clockSkew backdates NotBefore so that nodes whose clocks differ a
	// little accept a freshly issued certificate.
	clockSkew = 5 * time.Minute
	// caCommonName names kemu's migration CA.
	caCommonName = "kemu-migration-ca"
)

// CA is kemu's migration certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// Bundle is every CA certificate that is trusted (Cert first); a
	// rotated Secret may list the previous CA after the new one so that
	// nodes on either CA keep talking during the rollout.
	Bundle []*x509.Certificate
}

// NewCA generates a CA (ECDSA P-256) valid from now for CAValidity.
func NewCA(now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: caCommonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, Bundle: []*x509.Certificate{cert}}, nil
}

// IssueNode issues the node's certificate (ECDSA P-256, CN and DNS SAN the
// node name, server and client auth, valid from now for NodeValidity)
// and returns the node's material: the CA bundle and the node's key pair.
func (ca *CA) IssueNode(nodeName string, now time.Time) (*Material, error) {
	if nodeName == "" {
		return nil, errors.New("issue node certificate: empty node name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key for node %q: %w", nodeName, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(NodeValidity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: nodeName},
		DNSNames:     []string{nodeName},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("create certificate for node %q: %w", nodeName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key of node %q: %w", nodeName, err)
	}
	return NewMaterial(encodeCerts(ca.Bundle), pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER))
}

// SecretData encodes the CA as the CA Secret's data (ca.crt: the bundle,
// ca.key: the key of its first certificate).
func (ca *CA) SecretData() (map[string][]byte, error) {
	keyDER, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	return map[string][]byte{
		CACertKey: encodeCerts(ca.Bundle),
		CAKeyKey:  pemBlock("EC PRIVATE KEY", keyDER),
	}, nil
}

// CAFromSecretData decodes the CA Secret's data: ca.crt (one or more CA
// certificates; the first is the one ca.key signs with) and ca.key.
func CAFromSecretData(data map[string][]byte) (*CA, error) {
	bundle, err := parseCerts(data[CACertKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CACertKey, err)
	}
	for _, c := range bundle {
		if !c.IsCA {
			return nil, fmt.Errorf("%s: certificate %q is not a CA", CACertKey, c.Subject.CommonName)
		}
	}
	block, _ := pem.Decode(data[CAKeyKey])
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", CAKeyKey)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CAKeyKey, err)
	}
	pub, ok := bundle[0].PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("%s does not match the first certificate of %s", CAKeyKey, CACertKey)
	}
	return &CA{Cert: bundle[0], Key: key, Bundle: bundle}, nil
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
	cas, err := parseCerts(caPEM)
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
		CurrentTime: leaf.NotBefore.Add(clockSkew),
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

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return serial, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pemBlock("CERTIFICATE", c.Raw)...)
	}
	return out
}

// parseCerts parses one or more PEM certificates; anything else is an
// error.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	return certs, nil
}
