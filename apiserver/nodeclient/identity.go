package nodeclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/certrequest"
	"github.com/kemu-dev/kemu/kube/migrationca"
)

// Identity is kemu-api's client certificate for the node agents
// (nodeapi.ClientCommonName), asked of kemu's node CA with a
// CertificateSigningRequest, its key only in memory, renewed at two thirds
// of its life. It implements Credentials.
type Identity struct {
	mu    sync.RWMutex
	cert  *tls.Certificate
	roots *x509.CertPool
}

// issued is one certificate with the CA bundle it chains to.
type issued struct {
	cert  tls.Certificate
	leaf  *x509.Certificate
	roots *x509.CertPool
}

// Run keeps the identity current until ctx ends; namespace holds the CA
// bundle's ConfigMap.
func (id *Identity) Run(ctx context.Context, client kubernetes.Interface, namespace string) error {
	return certrequest.Keep(ctx, func(ctx context.Context) (*issued, error) {
		return request(ctx, client, namespace)
	}, func(got *issued) (*x509.Certificate, error) {
		id.mu.Lock()
		id.cert, id.roots = &got.cert, got.roots
		id.mu.Unlock()
		klog.FromContext(ctx).Info("Got kemu-api's node client certificate", "notAfter", got.leaf.NotAfter)
		return got.leaf, nil
	})
}

func request(ctx context.Context, client kubernetes.Interface, namespace string) (*issued, error) {
	tmpl := migrationca.ClientTemplate()
	got, err := certrequest.Request(ctx, certrequest.Config{
		Client: client, Namespace: namespace, GenerateName: "kemu-api-",
		CommonName: tmpl.Subject.CommonName, Usages: migrationca.ClientUsages,
	})
	if err != nil {
		return nil, fmt.Errorf("kemu-api's node client certificate: %w", err)
	}
	bundle, err := migrationca.ParseCerts(got.CABundle)
	if err != nil || len(bundle) == 0 {
		return nil, fmt.Errorf("kemu-api's node client certificate: CA bundle: %v", errors.Join(err, errors.New("no certificate")))
	}
	roots := x509.NewCertPool()
	for _, c := range bundle {
		roots.AddCert(c)
	}
	certs, err := migrationca.ParseCerts(got.CertPEM)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("kemu-api's node client certificate (request %s): %v", got.CSR, errors.Join(err, errors.New("no certificate")))
	}
	leaf := certs[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("kemu-api's node client certificate (request %s): %w", got.CSR, err)
	}
	if err := migrationca.CheckClientCertificate(leaf); err != nil {
		return nil, fmt.Errorf("kemu-api's node client certificate (request %s): %w", got.CSR, err)
	}
	return &issued{cert: tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: got.Key, Leaf: leaf}, leaf: leaf, roots: roots}, nil
}

// ClientTLS implements Credentials.
func (id *Identity) ClientTLS(nodeName string) (*tls.Config, error) {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if id.cert == nil {
		return nil, errors.New("not issued yet (is kemu-controller, which signs it, running?)")
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*id.cert},
		RootCAs:      id.roots,
		ServerName:   nodeName,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

var _ Credentials = (*Identity)(nil)
