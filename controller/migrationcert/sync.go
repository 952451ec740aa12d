package migrationcert

import (
	"context"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/migrationca"
)

// sync reconciles one request: not yet decided → approved or denied by
// migrationca.Review (a node agent's node certificate, kemu-api's client
// certificate); approved and not issued → signed. An
// approved request the rules refuse (approved by someone else) is marked
// Failed, never signed. Issued, denied and failed requests are final.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	csr, err := c.lister.Get(key)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if csr.Spec.SignerName != migrationca.SignerName || len(csr.Status.Certificate) > 0 ||
		hasCondition(csr, certificatesv1.CertificateDenied) || hasCondition(csr, certificatesv1.CertificateFailed) {
		return 0, nil
	}
	logger := klog.FromContext(ctx).WithValues("csr", csr.Name, "requester", csr.Spec.Username)
	grant, reviewErr := migrationca.Review(csr, c.cfg.Namespace)
	var refused *migrationca.ReviewError
	if reviewErr != nil && !errors.As(reviewErr, &refused) {
		return 0, reviewErr
	}
	if !hasCondition(csr, certificatesv1.CertificateApproved) {
		if refused != nil {
			logger.Info("Denied a migration certificate request", "reason", refused.Reason, "message", refused.Message)
			return 0, c.decide(ctx, csr, certificatesv1.CertificateDenied, refused.Reason, refused.Message)
		}
		if grant.Client {
			logger.Info("Approved kemu-api's client certificate request")
			return 0, c.decide(ctx, csr, certificatesv1.CertificateApproved, migrationca.ReasonApprovedClient,
				"kemu-api asks for its client certificate to the node agents")
		}
		logger.Info("Approved a migration certificate request", "node", grant.Node)
		return 0, c.decide(ctx, csr, certificatesv1.CertificateApproved, migrationca.ReasonApproved,
			"the node agent of node "+grant.Node+" asks for its own migration certificate")
	}
	if refused != nil {
		logger.Info("Refused to sign an approved migration certificate request", "reason", refused.Reason, "message", refused.Message)
		return 0, c.fail(ctx, csr, refused)
	}
	ca := c.ca.Load()
	if ca == nil {
		return 0, nil // queued again once the CA is loaded
	}
	var validity time.Duration
	if s := csr.Spec.ExpirationSeconds; s != nil {
		validity = time.Duration(*s) * time.Second
	}
	der, err := ca.SignGrant(grant, c.cfg.Now(), validity)
	if err != nil {
		return 0, err
	}
	csr = csr.DeepCopy()
	csr.Status.Certificate = migrationca.PEMBlock("CERTIFICATE", der)
	if _, err := c.cfg.Client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("write the certificate of request %s: %w", csr.Name, err)
	}
	logger.Info("Signed a certificate", "node", grant.Node, "client", grant.Client)
	return 0, nil
}

// decide writes the Approved or Denied condition (the approval
// subresource).
func (c *Controller) decide(ctx context.Context, csr *certificatesv1.CertificateSigningRequest,
	typ certificatesv1.RequestConditionType, reason, message string) error {
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, condition(typ, reason, message, c.cfg.Now()))
	if _, err := c.cfg.Client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("%s request %s: %w", typ, csr.Name, err)
	}
	return nil
}

// fail writes the Failed condition (the status subresource).
func (c *Controller) fail(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, refused *migrationca.ReviewError) error {
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, condition(certificatesv1.CertificateFailed, refused.Reason, refused.Message, c.cfg.Now()))
	if _, err := c.cfg.Client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("fail request %s: %w", csr.Name, err)
	}
	return nil
}

func condition(typ certificatesv1.RequestConditionType, reason, message string, now time.Time) certificatesv1.CertificateSigningRequestCondition {
	return certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		LastUpdateTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	}
}

func hasCondition(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
