// Package migrationcert gets the node agent its migration certificate
// (through kube/certrequest): a key generated in memory (never sent
// anywhere), a CertificateSigningRequest of signer kemu.dev/migration for
// the node's identity, the certificate the controller signs verified against the
// published CA bundle and the node's name, renewed at two thirds of its
// life while the old one keeps serving. Proxy runs the node's migration
// proxy with it. See docs/deploy.md.
package migrationcert

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/certrequest"
	"github.com/kemu-dev/kemu/kube/migrationca"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// DefaultRequestTimeout bounds the wait for one request's certificate.
const DefaultRequestTimeout = certrequest.DefaultRequestTimeout

// Config says who asks and where the CA bundle is.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// Namespace holds the CA bundle's ConfigMap (migrationca.ConfigMapName).
	Namespace string
	// Validity asks for a shorter certificate than the signer's
	// default (spec.expirationSeconds; 0: the signer's, at least 10 min).
	Validity time.Duration
	// RequestTimeout bounds each request (default DefaultRequestTimeout).
	RequestTimeout time.Duration
}

func (c *Config) defaults() error {
	if c.Client == nil || c.NodeName == "" || c.Namespace == "" {
		return errors.New("migration certificate: client, node name and namespace are required")
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	return nil
}

// Request gets one certificate for the node (certrequest.Request with
// the node's identity, migrationca.NodeTemplate and Usages) and verifies
// it against the CA bundle and the node's name. The key never leaves the
// process.
func Request(ctx context.Context, cfg Config) (*migrationproxy.Material, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	tmpl := migrationca.NodeTemplate(cfg.NodeName)
	got, err := certrequest.Request(ctx, certrequest.Config{
		Client: cfg.Client, Namespace: cfg.Namespace, GenerateName: "kemu-migration-" + cfg.NodeName + "-",
		CommonName: tmpl.Subject.CommonName, DNSNames: tmpl.DNSNames, Usages: migrationca.Usages,
		Validity: cfg.Validity, RequestTimeout: cfg.RequestTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("migration certificate: %w", err)
	}
	m, err := migrationproxy.NewMaterialFromKey(got.CABundle, got.CertPEM, got.Key)
	if err != nil {
		return nil, fmt.Errorf("migration certificate request %s: %w", got.CSR, err)
	}
	if err := migrationca.CheckNodeCertificate(m.Leaf(), cfg.NodeName); err != nil {
		return nil, fmt.Errorf("migration certificate request %s: %w", got.CSR, err)
	}
	klog.FromContext(ctx).Info("Got the migration certificate", "csr", got.CSR, "node", cfg.NodeName, "notAfter", m.Leaf().NotAfter)
	return m, nil
}
