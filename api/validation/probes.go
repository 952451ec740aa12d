package validation

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Bounds of a probe's exec command and httpGet headers (kemu's: the command
// goes to the guest agent through the launcher's command server, and the
// launcher Pod carries it in its spec).
const (
	MaxProbeCommandArgs  = 64
	MaxProbeCommandBytes = 16 << 10
	MaxProbeHTTPHeaders  = 32
	// MaxProbeSeconds bounds every seconds field of a probe (a day).
	MaxProbeSeconds = 86400
)

// validatePodFields checks hostname, subdomain, priorityClassName and
// schedulerName by the rules of the launcher Pod's fields they become
// (Kubernetes': a DNS-1123 label for hostname and subdomain, a DNS-1123
// subdomain for the others). KubeVirt checks subdomain as a DNS-1123
// subdomain, which a Pod refuses when it holds a dot.
func validatePodFields(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, f := range []struct {
		name, val string
	}{{"hostname", spec.Hostname}, {"subdomain", spec.Subdomain}} {
		if f.val == "" {
			continue
		}
		for _, msg := range utilvalidation.IsDNS1123Label(f.val) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(f.name), f.val, msg))
		}
	}
	for _, f := range []struct {
		name, val string
	}{{"priorityClassName", spec.PriorityClassName}, {"schedulerName", spec.SchedulerName}} {
		if f.val != "" {
			allErrs = append(allErrs, dnsSubdomain(fldPath.Child(f.name), f.val)...)
		}
	}
	return allErrs
}

// validateProbes checks readinessProbe and livenessProbe: KubeVirt's rules
// (exactly one handler; httpGet and tcpSocket only with the pod network; no
// livenessProbe with startStrategy Paused), the Pod's (liveness
// successThreshold 1, ports, schemes, header names) and kemu's bounds.
func validateProbes(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateProbe(spec, spec.ReadinessProbe, fldPath.Child("readinessProbe"))...)
	allErrs = append(allErrs, validateProbe(spec, spec.LivenessProbe, fldPath.Child("livenessProbe"))...)
	if p := spec.LivenessProbe; p != nil && p.SuccessThreshold > 1 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("livenessProbe", "successThreshold"), p.SuccessThreshold, "must be 1 for a liveness probe"))
	}
	if spec.LivenessProbe != nil && spec.StartStrategy != nil && *spec.StartStrategy == v1.StartStrategyPaused {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("startStrategy"), *spec.StartStrategy,
			"either startStrategy or livenessProbe: pausing a VMI with a livenessProbe is not supported"))
	}
	return allErrs
}

func validateProbe(spec *v1.VirtualMachineInstanceSpec, p *v1.Probe, fldPath *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var allErrs field.ErrorList
	var set []string
	if p.Exec != nil {
		set = append(set, "exec")
		allErrs = append(allErrs, validateProbeCommand(p.Exec.Command, fldPath.Child("exec", "command"))...)
	}
	if p.GuestAgentPing != nil {
		set = append(set, "guestAgentPing")
	}
	if h := p.HTTPGet; h != nil {
		set = append(set, "httpGet")
		hp := fldPath.Child("httpGet")
		allErrs = append(allErrs, validateProbePort(spec, h.Port, hp.Child("port"))...)
		allErrs = append(allErrs, probeHost(h.Host, hp.Child("host"))...)
		if h.Scheme != "" {
			allErrs = append(allErrs, oneOf(hp.Child("scheme"), string(h.Scheme), string(corev1.URISchemeHTTP), string(corev1.URISchemeHTTPS))...)
		}
		if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
			allErrs = append(allErrs, field.Invalid(hp.Child("path"), h.Path, "must start with /"))
		}
		if len(h.HTTPHeaders) > MaxProbeHTTPHeaders {
			allErrs = append(allErrs, field.TooMany(hp.Child("httpHeaders"), len(h.HTTPHeaders), MaxProbeHTTPHeaders))
		}
		for i, hdr := range h.HTTPHeaders {
			for _, msg := range utilvalidation.IsHTTPHeaderName(hdr.Name) {
				allErrs = append(allErrs, field.Invalid(hp.Child("httpHeaders").Index(i).Child("name"), hdr.Name, msg))
			}
		}
	}
	if t := p.TCPSocket; t != nil {
		set = append(set, "tcpSocket")
		allErrs = append(allErrs, validateProbePort(spec, t.Port, fldPath.Child("tcpSocket", "port"))...)
		allErrs = append(allErrs, probeHost(t.Host, fldPath.Child("tcpSocket", "host"))...)
	}
	switch {
	case len(set) == 0:
		allErrs = append(allErrs, field.Required(fldPath, "one of exec, guestAgentPing, httpGet or tcpSocket must be set"))
	case len(set) > 1:
		allErrs = append(allErrs, field.Invalid(fldPath, strings.Join(set, ", "), "must have exactly one probe type set"))
	}
	if p.HTTPGet != nil || p.TCPSocket != nil {
		if !hasPodNetwork(spec) {
			which := "httpGet"
			if p.TCPSocket != nil {
				which = "tcpSocket"
			}
			allErrs = append(allErrs, field.Invalid(fldPath.Child(which), "", "is only allowed if the pod network is attached"))
		}
	}
	for _, f := range []struct {
		name string
		v    int32
	}{{"initialDelaySeconds", p.InitialDelaySeconds}, {"timeoutSeconds", p.TimeoutSeconds}, {"periodSeconds", p.PeriodSeconds},
		{"successThreshold", p.SuccessThreshold}, {"failureThreshold", p.FailureThreshold}} {
		if f.v < 0 || f.v > MaxProbeSeconds {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(f.name), f.v, fmt.Sprintf("must be between 0 and %d", MaxProbeSeconds)))
		}
	}
	return allErrs
}

// ValidateProbeCommand checks an exec probe's command: at least its
// program, at most MaxProbeCommandArgs words and MaxProbeCommandBytes in
// all, no NUL byte. The launcher's command server applies it too.
func ValidateProbeCommand(cmd []string) error {
	if errs := validateProbeCommand(cmd, field.NewPath("command")); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

func validateProbeCommand(cmd []string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch {
	case len(cmd) == 0 || cmd[0] == "":
		return append(allErrs, field.Required(fldPath, "the command to run in the guest"))
	case len(cmd) > MaxProbeCommandArgs:
		return append(allErrs, field.TooMany(fldPath, len(cmd), MaxProbeCommandArgs))
	}
	total := 0
	for i, a := range cmd {
		total += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i), a, "must not contain a NUL byte"))
		}
	}
	if total > MaxProbeCommandBytes {
		allErrs = append(allErrs, field.TooLong(fldPath, "", MaxProbeCommandBytes))
	}
	return allErrs
}

// validateProbePort: a port number, or the name of a port of one of the
// VMI's interfaces (the launcher Pod's container ports).
func validateProbePort(spec *v1.VirtualMachineInstanceSpec, port intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	if port.Type == intstr.Int {
		if port.IntVal < 1 || port.IntVal > 65535 {
			return field.ErrorList{field.Invalid(fldPath, port.IntVal, "must be between 1 and 65535")}
		}
		return nil
	}
	if msgs := utilvalidation.IsValidPortName(port.StrVal); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(fldPath, port.StrVal, strings.Join(msgs, "; "))}
	}
	for _, i := range spec.Domain.Devices.Interfaces {
		for _, p := range i.Ports {
			if p.Name == port.StrVal {
				return nil
			}
		}
	}
	return field.ErrorList{field.Invalid(fldPath, port.StrVal, "names no port of spec.domain.devices.interfaces[*].ports")}
}

// probeHost refuses a host: kemu's probes check the guest, through the
// launcher Pod's address (a host would have the kubelet probe another
// machine from the node).
func probeHost(host string, fldPath *field.Path) field.ErrorList {
	if host == "" {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, host, "must be empty: kemu probes the guest through the launcher Pod's address only")}
}

func hasPodNetwork(spec *v1.VirtualMachineInstanceSpec) bool {
	for _, n := range spec.Networks {
		if n.Pod != nil {
			return true
		}
	}
	return false
}
