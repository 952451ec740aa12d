package v1alpha1

import corev1 "k8s.io/api/core/v1"

// Probe is a health check of the VMI (KubeVirt's Probe): carried to the
// launcher Pod's compute container (tcpSocket and httpGet reach the guest
// through the Pod's address; exec and guestAgentPing run kemu-launcher's
// probe command, which asks the launcher and so the guest agent).
type Probe struct {
	// Handler is the check: exactly one of exec, guestAgentPing, httpGet,
	// tcpSocket.
	Handler `json:",inline"`
	// InitialDelaySeconds after the launcher starts before the first check.
	// +optional
	// +kubebuilder:validation:Minimum=0
	InitialDelaySeconds int32 `json:"initialDelaySeconds,omitempty"`
	// TimeoutSeconds of one check; default 1. An exec check that times out
	// fails, but its command goes on in the guest.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// PeriodSeconds between checks; default 10.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`
	// SuccessThreshold: consecutive successes after a failure to count as
	// succeeded; default 1, and 1 for liveness.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
	// FailureThreshold: consecutive failures to count as failed; default 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
}

// Handler is what a Probe checks (KubeVirt's Handler). One and only one of
// its fields is set.
type Handler struct {
	// Exec runs a command in the guest through the guest agent (guest-exec,
	// no shell); exit status 0 is success. No guest agent: failure.
	// +optional
	Exec *corev1.ExecAction `json:"exec,omitempty"`
	// GuestAgentPing succeeds when the guest agent answers guest-ping.
	// +optional
	GuestAgentPing *GuestAgentPing `json:"guestAgentPing,omitempty"`
	// HTTPGet asks the guest over HTTP through the Pod's address.
	// +optional
	HTTPGet *corev1.HTTPGetAction `json:"httpGet,omitempty"`
	// TCPSocket connects to a port of the guest through the Pod's address.
	// +optional
	TCPSocket *corev1.TCPSocketAction `json:"tcpSocket,omitempty"`
}

// GuestAgentPing probes the guest agent with guest-ping.
type GuestAgentPing struct{}
