package migrationca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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
// TLSKeyKey (never the CA's key); the published ConfigMap holds
// CACertKey only.
const (
	CACertKey  = corev1.ServiceAccountRootCAKey // "ca.crt"
	CAKeyKey   = "ca.key"
	TLSCertKey = corev1.TLSCertKey       // "tls.crt"
	TLSKeyKey  = corev1.TLSPrivateKeyKey // "tls.key"
)

// Validity of the certificates. Node certificates are short-lived and
// renewed by their node agents; the CA lives in the Secret.
const (
	CAValidity   = 5 * 365 * 24 * time.Hour
	NodeValidity = 90 * 24 * time.Hour
	// ClockSkew backdates NotBefore so that nodes whose clocks differ a
	// little accept a freshly issued certificate.
	ClockSkew = 5 * time.Minute
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

// NewCA generates kemu's migration CA (ECDSA P-256) valid from now for
// CAValidity.
func NewCA(now time.Time) (*CA, error) { return NewNamedCA(caCommonName, now, CAValidity) }

// NewNamedCA generates a CA (ECDSA P-256) named commonName, valid from now
// for validity.
func NewNamedCA(commonName string, now time.Time, validity time.Duration) (*CA, error) {
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
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-ClockSkew),
		NotAfter:              now.Add(validity),
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

// SignNode signs the certificate of node nodeName for the public key pub
// (NodeTemplate's identity), valid from now for validity (NodeValidity
// when zero or longer), never beyond the CA. It returns the certificate's
// DER.
func (ca *CA) SignNode(nodeName string, pub crypto.PublicKey, now time.Time, validity time.Duration) ([]byte, error) {
	if nodeName == "" {
		return nil, errors.New("sign node certificate: empty node name")
	}
	if validity <= 0 || validity > NodeValidity {
		validity = NodeValidity
	}
	der, err := ca.Sign(NodeTemplate(nodeName), pub, now, validity)
	if err != nil {
		return nil, fmt.Errorf("create certificate for node %q: %w", nodeName, err)
	}
	return der, nil
}

// Sign signs the identity tmpl (its subject, SANs and usages) for the
// public key pub, valid from now (backdated by ClockSkew) for validity but
// never beyond the CA, with a fresh serial. It returns the certificate's
// DER.
func (ca *CA) Sign(tmpl *x509.Certificate, pub crypto.PublicKey, now time.Time, validity time.Duration) ([]byte, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	t := *tmpl
	t.SerialNumber = serial
	t.NotBefore = now.Add(-ClockSkew)
	t.NotAfter = now.Add(validity)
	if t.NotAfter.After(ca.Cert.NotAfter) {
		t.NotAfter = ca.Cert.NotAfter
	}
	return x509.CreateCertificate(rand.Reader, &t, ca.Cert, pub, ca.Key)
}

// NodeTemplate is the identity of node nodeName's certificate: CN and the
// only DNS SAN the node name, digital signature, server and client auth.
func NodeTemplate(nodeName string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: nodeName},
		DNSNames:    []string{nodeName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
}

// SecretData encodes the CA as the CA Secret's data (ca.crt: the bundle,
// ca.key: the key of its first certificate).
func (ca *CA) SecretData() (map[string][]byte, error) {
	keyDER, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	return map[string][]byte{
		CACertKey: EncodeCerts(ca.Bundle),
		CAKeyKey:  PEMBlock("EC PRIVATE KEY", keyDER),
	}, nil
}

// CAFromSecretData decodes the CA Secret's data: ca.crt (one or more CA
// certificates; the first is the one ca.key signs with) and ca.key.
func CAFromSecretData(data map[string][]byte) (*CA, error) {
	bundle, err := ParseCerts(data[CACertKey])
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

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return serial, nil
}

// PEMBlock encodes der as one PEM block of type typ.
func PEMBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// EncodeCerts encodes certificates as consecutive PEM blocks.
func EncodeCerts(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, PEMBlock("CERTIFICATE", c.Raw)...)
	}
	return out
}

// ParseCerts parses one or more PEM certificates; anything else is an
// error.
func ParseCerts(data []byte) ([]*x509.Certificate, error) {
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
