package certs

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Manager keeps the serving certificate in the Secret namespace/SecretName
// current and serves it to kemu-api's TLS listener. It implements
// dynamiccertificates.CertKeyContentProvider.
type Manager struct {
	client    kubernetes.Interface
	namespace string
	dnsNames  []string
	now       func() time.Time

	mu        sync.RWMutex
	certPEM   []byte
	keyPEM    []byte
	bundle    []byte
	listeners []dynamiccertificates.Listener
}

var _ dynamiccertificates.CertKeyContentProvider = (*Manager)(nil)

// NewManager manages the serving certificate of Service namespace/service.
func NewManager(client kubernetes.Interface, namespace, service string) *Manager {
	return &Manager{client: client, namespace: namespace, dnsNames: ServiceDNSNames(namespace, service), now: time.Now}
}

// Name implements dynamiccertificates.CertKeyContentProvider.
func (m *Manager) Name() string { return "secret/" + m.namespace + "/" + SecretName }

// CurrentCertKeyContent implements dynamiccertificates.CertKeyContentProvider.
func (m *Manager) CurrentCertKeyContent() ([]byte, []byte) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.certPEM, m.keyPEM
}

// AddListener implements dynamiccertificates.Notifier.
func (m *Manager) AddListener(l dynamiccertificates.Listener) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listeners = append(m.listeners, l)
}

// CABundle is the PEM bundle of the CAs clients should trust.
func (m *Manager) CABundle() []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.bundle
}

// Ensure reads the Secret, creates or renews what is missing or due, and
// makes the result current. Replicas racing on the Secret converge: the
// loser of a create or update reads the winner's Secret and uses it.
func (m *Manager) Ensure(ctx context.Context) error {
	secrets := m.client.CoreV1().Secrets(m.namespace)
	for attempt := 0; attempt < 5; attempt++ {
		s, err := secrets.Get(ctx, SecretName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("kemu-api certificates: secret %s/%s: %w", m.namespace, SecretName, err)
		}
		var cur *material
		if err == nil {
			cur, err = decode(s.Data)
			if err != nil {
				klog.InfoS("Replacing unusable kemu-api certificates", "secret", klog.KObj(s), "err", err)
				cur = nil
			}
		}
		next, err := renew(cur, m.dnsNames, m.now())
		if err != nil {
			return fmt.Errorf("kemu-api certificates: %w", err)
		}
		if next == nil {
			m.use(cur)
			return nil
		}
		data, err := next.encode()
		if err != nil {
			return fmt.Errorf("kemu-api certificates: %w", err)
		}
		if s == nil || apierrors.IsNotFound(err) || s.ResourceVersion == "" {
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.namespace, Name: SecretName}, Type: corev1.SecretTypeOpaque}
		}
		s.Data = data
		if s.ResourceVersion == "" {
			_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		} else {
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		switch {
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			continue // another replica wrote it: use theirs
		case err != nil:
			return fmt.Errorf("kemu-api certificates: writing secret %s/%s: %w", m.namespace, SecretName, err)
		}
		klog.InfoS("Wrote kemu-api certificates", "secret", klog.KRef(m.namespace, SecretName),
			"servingNotAfter", next.cert.NotAfter, "caNotAfter", next.ca.Cert.NotAfter, "cas", len(next.ca.Bundle))
		m.use(next)
		return nil
	}
	return fmt.Errorf("kemu-api certificates: secret %s/%s kept changing", m.namespace, SecretName)
}

// use makes mat current and tells the listeners when it changed.
func (m *Manager) use(mat *material) {
	m.mu.Lock()
	changed := !equalPEM(m.certPEM, mat.certPEM) || !equalPEM(m.keyPEM, mat.keyPEM)
	m.certPEM, m.keyPEM, m.bundle = mat.certPEM, mat.keyPEM, mat.caBundle()
	listeners := append([]dynamiccertificates.Listener(nil), m.listeners...)
	m.mu.Unlock()
	if changed {
		for _, l := range listeners {
			l.Enqueue()
		}
	}
}

// Run calls Ensure and then inject with the CA bundle every interval until
// ctx ends; failures are logged and retried at the next tick.
func (m *Manager) Run(ctx context.Context, interval time.Duration, inject func(context.Context, []byte) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := m.Ensure(ctx); err != nil {
			klog.ErrorS(err, "Keeping kemu-api's certificates")
		} else if err := inject(ctx, m.CABundle()); err != nil {
			klog.ErrorS(err, "Writing kemu-api's CA bundle")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
