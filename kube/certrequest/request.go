// Package certrequest is the client side of kemu's CA (kube/migrationca):
// a key generated in memory (never sent anywhere), a
// CertificateSigningRequest of signer kemu.dev/migration for an identity,
// the signed certificate waited for, then the request deleted; Obtain
// retries with back-off and RenewAt says when to renew. The node agent
// (its node certificate) and kemu-api (its client certificate) both use
// it. See docs/deploy.md.
package certrequest

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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/migrationca"
)

// DefaultRequestTimeout bounds the wait for one request's certificate.
const DefaultRequestTimeout = 2 * time.Minute

// Config says who asks for what and where the CA bundle is.
type Config struct {
	Client kubernetes.Interface
	// Namespace holds the CA bundle's ConfigMap (migrationca.ConfigMapName).
	Namespace string
	// GenerateName prefixes the request's name.
	GenerateName string
	// CommonName and DNSNames are the request's subject and SANs.
	CommonName string
	DNSNames   []string
	// Usages are the request's spec.usages.
	Usages []certificatesv1.KeyUsage
	// Validity asks for a shorter certificate than the signer's
	// default (spec.expirationSeconds; 0: the signer's, at least 10 min).
	Validity time.Duration
	// RequestTimeout bounds each request (default DefaultRequestTimeout).
	RequestTimeout time.Duration
}

func (c *Config) defaults() error {
	if c.Client == nil || c.Namespace == "" || c.GenerateName == "" || c.CommonName == "" || len(c.Usages) == 0 {
		return errors.New("certificate request: client, namespace, name, common name and usages are required")
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	return nil
}

// Issued is what a request got: the CA bundle (PEM) read before asking,
// the signed certificate (PEM) and its key, which never left the process.
type Issued struct {
	CABundle []byte
	CertPEM  []byte
	Key      *ecdsa.PrivateKey
	// CSR names the request it was issued for.
	CSR string
}

// Request gets one certificate: reads the CA bundle, asks, waits (at most
// RequestTimeout) for the signed certificate and deletes the request. It
// does not check the certificate: its caller verifies the chain and the
// identity (migrationca.CheckNodeCertificate, CheckClientCertificate).
func Request(ctx context.Context, cfg Config) (*Issued, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	cm, err := cfg.Client.CoreV1().ConfigMaps(cfg.Namespace).Get(ctx, migrationca.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("CA bundle %s/%s: %w", cfg.Namespace, migrationca.ConfigMapName, err)
	}
	bundle := []byte(cm.Data[migrationca.CACertKey])
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the key of %q: %w", cfg.CommonName, err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cfg.CommonName}, DNSNames: cfg.DNSNames,
	}, key)
	if err != nil {
		return nil, fmt.Errorf("create the certificate request of %q: %w", cfg.CommonName, err)
	}
	req := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: cfg.GenerateName},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    migrationca.PEMBlock("CERTIFICATE REQUEST", der),
			SignerName: migrationca.SignerName,
			Usages:     cfg.Usages,
		},
	}
	if cfg.Validity > 0 {
		req.Spec.ExpirationSeconds = csr.DurationToExpirationSeconds(cfg.Validity)
	}
	csrs := cfg.Client.CertificatesV1().CertificateSigningRequests()
	created, err := csrs.Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create the certificate request of %q: %w", cfg.CommonName, err)
	}
	defer func() {
		// Used or refused, the request is of no more use; the
		// cluster's CSR cleaner removes what a failed delete leaves.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer dcancel()
		uid := created.UID
		if err := csrs.Delete(dctx, created.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
			klog.FromContext(ctx).Error(err, "Deleting the certificate request", "csr", created.Name)
		}
	}()
	certPEM, err := csr.WaitForCertificate(ctx, cfg.Client, created.Name, created.UID)
	if err != nil {
		return nil, fmt.Errorf("certificate request %s: %w", created.Name, err)
	}
	return &Issued{CABundle: bundle, CertPEM: certPEM, Key: key, CSR: created.Name}, nil
}

// Obtain calls request until it succeeds (errors logged, retried with
// back-off from 1 s to 1 min) or ctx ends (ctx's error).
func Obtain[T any](ctx context.Context, request func(context.Context) (T, error)) (T, error) {
	var got T
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: time.Minute}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		var err error
		if got, err = request(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Certificate not issued, retrying")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		var zero T
		return zero, errors.Join(err, ctx.Err())
	}
	return got, nil
}

// RenewAt is when a certificate valid from notBefore to notAfter is
// renewed: at two thirds of its life.
func RenewAt(notBefore, notAfter time.Time) time.Time {
	return notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)
}

// Keep obtains a certificate with request (Obtain), hands it to use, and
// renews it at RenewAt of the leaf use returns, until ctx ends (nil) or
// use fails (its error). A failed renewal retries while the certificate
// in use keeps serving.
func Keep[T any](ctx context.Context, request func(context.Context) (T, error), use func(T) (*x509.Certificate, error)) error {
	for {
		got, err := Obtain(ctx, request)
		if err != nil {
			return nil // ctx ended
		}
		leaf, err := use(got)
		if err != nil {
			return err
		}
		timer := time.NewTimer(time.Until(RenewAt(leaf.NotBefore, leaf.NotAfter)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}
