package migrationca

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// EnsureSecret returns the migration CA from the Secret namespace/name,
// creating the Secret with a fresh CA when it is absent. Two node agents
// racing to create it both end up with the one that won (AlreadyExists →
// read again). A Secret that exists but does not hold a valid CA is an
// error, never overwritten.
func EnsureSecret(ctx context.Context, client kubernetes.Interface, namespace, name string) (*CA, error) {
	secrets := client.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s, err = createCASecret(ctx, client, namespace, name)
		if apierrors.IsAlreadyExists(err) {
			s, err = secrets.Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("migration CA secret %s/%s: %w", namespace, name, err)
	}
	ca, err := CAFromSecretData(s.Data)
	if err != nil {
		return nil, fmt.Errorf("migration CA secret %s/%s: %w", namespace, name, err)
	}
	return ca, nil
}

func createCASecret(ctx context.Context, client kubernetes.Interface, namespace, name string) (*corev1.Secret, error) {
	ca, err := NewCA(time.Now())
	if err != nil {
		return nil, err
	}
	data, err := ca.SecretData()
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
	created, err := client.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	klog.InfoS("Created the migration CA secret", "secret", klog.KObj(created), "notAfter", ca.Cert.NotAfter)
	return created, nil
}
