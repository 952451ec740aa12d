package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"time"

	"github.com/kemu-dev/kemu/kube/migrationca"
)

// Names and lifetimes.
const (
	// SecretName is the Secret holding kemu-api's CA and serving
	// certificate (ca.crt, ca.key, tls.crt, tls.key).
	SecretName = "kemu-api-certs"
	// CACommonName names the CA; it signs only kemu-api's serving
	// certificates (kube-apiserver trusts it for kemu-api's Service only).
	CACommonName = "kemu-api-ca"
	// CAValidity and ServingValidity: a CA is replaced, and a serving
	// certificate renewed, when less than a third of its life is left;
	// a replaced CA stays in the bundle until it expires, so clients that
	// still trust only the old one keep working during the rollout.
	CAValidity      = 365 * 24 * time.Hour
	ServingValidity = 30 * 24 * time.Hour
)

// material is the Secret's content, decoded.
type material struct {
	ca      *migrationca.CA
	cert    *x509.Certificate
	certPEM []byte
	keyPEM  []byte
}

// renewDue says whether a certificate valid from notBefore to notAfter
// has less than a third of its life left at now.
func renewDue(notBefore, notAfter, now time.Time) bool {
	return now.After(notAfter.Add(-notAfter.Sub(notBefore) / 3))
}

// decode reads the Secret's data; any part missing or broken is an error
// (the caller then makes new material).
func decode(data map[string][]byte) (*material, error) {
	ca, err := migrationca.CAFromSecretData(data)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM := data[migrationca.TLSCertKey], data[migrationca.TLSKeyKey]
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", migrationca.TLSCertKey, migrationca.TLSKeyKey, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", migrationca.TLSCertKey, err)
	}
	return &material{ca: ca, cert: cert, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// encode is decode's inverse.
func (m *material) encode() (map[string][]byte, error) {
	data, err := m.ca.SecretData()
	if err != nil {
		return nil, err
	}
	data[migrationca.TLSCertKey] = m.certPEM
	data[migrationca.TLSKeyKey] = m.keyPEM
	return data, nil
}

// caBundle is the PEM of every CA the clients should trust.
func (m *material) caBundle() []byte { return migrationca.EncodeCerts(m.ca.Bundle) }

// renew returns what must change at now for a serving certificate naming
// dnsNames: nil when nothing must. It never changes m.
func renew(m *material, dnsNames []string, now time.Time) (*material, error) {
	next := &material{}
	if m != nil {
		*next = *m
	}
	changed := false
	if next.ca == nil || renewDue(next.ca.Cert.NotBefore, next.ca.Cert.NotAfter, now) {
		ca, err := migrationca.NewNamedCA(CACommonName, now, CAValidity)
		if err != nil {
			return nil, err
		}
		if next.ca != nil {
			ca.Bundle = append(ca.Bundle, unexpired(next.ca.Bundle, now)...)
		}
		next.ca, next.cert, changed = ca, nil, true
	}
	if live := unexpired(next.ca.Bundle, now); len(live) != len(next.ca.Bundle) && len(live) > 0 && live[0] == next.ca.Cert {
		ca := *next.ca
		ca.Bundle = live
		next.ca, changed = &ca, true
	}
	if next.cert == nil || renewDue(next.cert.NotBefore, next.cert.NotAfter, now) ||
		next.cert.CheckSignatureFrom(next.ca.Cert) != nil || !sameNames(next.cert.DNSNames, dnsNames) {
		if err := next.issue(dnsNames, now); err != nil {
			return nil, err
		}
		changed = true
	}
	if !changed {
		return nil, nil
	}
	return next, nil
}

// unexpired are the certificates of bundle still valid at now, in order.
func unexpired(bundle []*x509.Certificate, now time.Time) []*x509.Certificate {
	var live []*x509.Certificate
	for _, c := range bundle {
		if now.Before(c.NotAfter) {
			live = append(live, c)
		}
	}
	return live
}

// issue signs a new serving certificate with a new key.
func (m *material) issue(dnsNames []string, now time.Time) error {
	if len(dnsNames) == 0 {
		return errors.New("serving certificate: no DNS names")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("serving key: %w", err)
	}
	der, err := m.ca.Sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsNames[0]},
		DNSNames:    dnsNames,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, &key.PublicKey, now, ServingValidity)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("serving key: %w", err)
	}
	m.cert = cert
	m.certPEM = migrationca.PEMBlock("CERTIFICATE", der)
	m.keyPEM = migrationca.PEMBlock("EC PRIVATE KEY", keyDER)
	return nil
}

func sameNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ServiceDNSNames are the names kube-apiserver uses for Service
// namespace/name (webhooks and APIServices verify <name>.<namespace>.svc).
func ServiceDNSNames(namespace, name string) []string {
	return []string{
		name + "." + namespace + ".svc",
		name + "." + namespace + ".svc.cluster.local",
		name + "." + namespace,
		name,
	}
}

func equalPEM(a, b []byte) bool { return bytes.Equal(a, b) }
