package migrationcert

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/migrationca"
)

// ensureCA loads the CA from its Secret (creating it when absent) and
// publishes the bundle, retrying with back-off until both worked or ctx
// ends; then the queued requests are signed.
func (c *Controller) ensureCA(ctx context.Context) {
	logger := klog.FromContext(ctx)
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: time.Minute}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		ca, err := migrationca.EnsureSecret(ctx, c.cfg.Client, c.cfg.Namespace, migrationca.SecretName)
		if err == nil {
			err = c.publish(ctx, ca)
		}
		if err != nil {
			logger.Error(err, "Migration CA not ready, retrying")
			return false, nil
		}
		c.ca.Store(ca)
		return true, nil
	})
	if err != nil {
		return // ctx ended
	}
	logger.Info("Migration CA ready", "secret", klog.KRef(c.cfg.Namespace, migrationca.SecretName),
		"configMap", klog.KRef(c.cfg.Namespace, migrationca.ConfigMapName), "notAfter", c.ca.Load().Cert.NotAfter)
	// Requests that arrived before the CA was loaded.
	for _, key := range c.queueKeys() {
		c.queue.Add(key)
	}
}

func (c *Controller) queueKeys() []string {
	csrs, err := c.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(csrs))
	for _, r := range csrs {
		keys = append(keys, r.Name)
	}
	return keys
}

// publish writes the CA bundle (ca.crt only) into the public ConfigMap,
// creating or updating it when it differs.
func (c *Controller) publish(ctx context.Context, ca *migrationca.CA) error {
	bundle := string(migrationca.EncodeCerts(ca.Bundle))
	cms := c.cfg.Client.CoreV1().ConfigMaps(c.cfg.Namespace)
	cm, err := cms.Get(ctx, migrationca.ConfigMapName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: migrationca.ConfigMapName},
			Data:       map[string]string{migrationca.CACertKey: bundle},
		}, metav1.CreateOptions{})
	case err == nil && cm.Data[migrationca.CACertKey] != bundle:
		cm = cm.DeepCopy()
		cm.Data = map[string]string{migrationca.CACertKey: bundle}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("publish the migration CA bundle in ConfigMap %s/%s: %w", c.cfg.Namespace, migrationca.ConfigMapName, err)
	}
	return nil
}
