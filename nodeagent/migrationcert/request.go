// Package migrationcert gets the node agent its migration certificate:
// a key generated in memory (never sent anywhere), a
// CertificateSigningRequest of signer kemu.dev/migration for the node's
// identity, the certificate the controller signs verified against the
// published CA bundle and the node's name, renewed at two thirds of its
// life while the old one keeps serving. Proxy runs the node's migration
// proxy with it. See docs/deploy.md.
package migrationcert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/migrationca"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// DefaultRequestTimeout bounds the wait for one request's certificate.
const DefaultRequestTimeout = 2 * time.Minute

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

// Request gets one certificate for the node: reads the CA bundle, asks,
// waits (at most RequestTimeout) for the signed certificate, verifies it
// and deletes the request. The key never leaves the process.
func Request(ctx context.Context, cfg Config) (*migrationproxy.Material, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	cm, err := cfg.Client.CoreV1().ConfigMaps(cfg.Namespace).Get(ctx, migrationca.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("migration CA bundle %s/%s: %w", cfg.Namespace, migrationca.ConfigMapName, err)
	}
	bundle := []byte(cm.Data[migrationca.CACertKey])
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the migration key: %w", err)
	}
	tmpl := migrationca.NodeTemplate(cfg.NodeName)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: tmpl.Subject.CommonName}, DNSNames: tmpl.DNSNames,
	}, key)
	if err != nil {
		return nil, fmt.Errorf("create the migration certificate request: %w", err)
	}
	req := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kemu-migration-" + cfg.NodeName + "-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    migrationca.PEMBlock("CERTIFICATE REQUEST", der),
			SignerName: migrationca.SignerName,
			Usages:     migrationca.Usages,
		},
	}
	if cfg.Validity > 0 {
		req.Spec.ExpirationSeconds = csr.DurationToExpirationSeconds(cfg.Validity)
	}
	csrs := cfg.Client.CertificatesV1().CertificateSigningRequests()
	created, err := csrs.Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create the migration certificate request: %w", err)
	}
	defer func() {
		// Used or refused, the request is of no more use; the
		// cluster's CSR cleaner removes what a failed delete leaves.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer dcancel()
		uid := created.UID
		if err := csrs.Delete(dctx, created.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
			klog.FromContext(ctx).Error(err, "Deleting the migration certificate request", "csr", created.Name)
		}
	}()
	certPEM, err := csr.WaitForCertificate(ctx, cfg.Client, created.Name, created.UID)
	if err != nil {
		return nil, fmt.Errorf("migration certificate request %s: %w", created.Name, err)
	}
	m, err := migrationproxy.NewMaterialFromKey(bundle, certPEM, key)
	if err != nil {
		return nil, fmt.Errorf("migration certificate request %s: %w", created.Name, err)
	}
	if err := migrationca.CheckNodeCertificate(m.Leaf(), cfg.NodeName); err != nil {
		return nil, fmt.Errorf("migration certificate request %s: %w", created.Name, err)
	}
	klog.FromContext(ctx).Info("Got the migration certificate", "csr", created.Name, "node", cfg.NodeName, "notAfter", m.Leaf().NotAfter)
	return m, nil
}
