package template

import (
	"strings"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Annotation prefixes a VMI's author may not put on its launcher Pod: the
// node's and Kubernetes' own (AppArmor and seccomp profiles among them),
// kemu's control annotations, Multus's (kemu writes them from the VMI's
// networks: MultusAnnotations), and the container runtimes' (CRI-O,
// containerd and Kata read annotations of their own from the Pod).
var reservedAnnotationDomains = append([]string{"kubernetes.io", "k8s.io", v1.GroupName}, launcherpod.MultusAnnotationDomains...)
var runtimeAnnotationPrefixes = []string{"io.kubernetes.", "io.containerd.", "io.katacontainers."}

// PodAnnotations are the annotations of a VMI its launcher Pod carries, as
// KubeVirt copies them (what a downwardAPI volume's metadata.annotations
// shows, what CNI plugins read), without the reserved ones above.
func PodAnnotations(vmiAnnotations map[string]string) map[string]string {
	var out map[string]string
	for k, v := range vmiAnnotations {
		if reservedAnnotation(k) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

func reservedAnnotation(key string) bool {
	for _, p := range runtimeAnnotationPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	domain, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, d := range reservedAnnotationDomains {
		if domain == d || strings.HasSuffix(domain, "."+d) {
			return true
		}
	}
	return false
}
