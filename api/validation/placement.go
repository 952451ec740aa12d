package validation

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Hugepage sizes (KubeVirt's, x86_64).
const (
	HugepageSize2Mi = "2Mi"
	HugepageSize1Gi = "1Gi"
)

// MaxRealtimeMaskLength bounds spec.domain.cpu.realtime.mask.
const MaxRealtimeMaskLength = 1024

// validatePlacement checks domain.cpu's dedicatedCpuPlacement,
// isolateEmulatorThread, numa and realtime and domain.memory.hugepages
// (KubeVirt's create admitter's rules).
func validatePlacement(d *v1.DomainSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	cpuPath := fldPath.Child("cpu")
	var c v1.CPU
	if d.CPU != nil {
		c = *d.CPU
	}
	hugepages := d.Memory != nil && d.Memory.Hugepages != nil
	if c.IsolateEmulatorThread && !c.DedicatedCPUPlacement {
		allErrs = append(allErrs, field.Invalid(cpuPath.Child("isolateEmulatorThread"), true,
			"only with spec.domain.cpu.dedicatedCpuPlacement"))
	}
	if c.NUMA != nil && c.NUMA.GuestMappingPassthrough != nil {
		p := cpuPath.Child("numa", "guestMappingPassthrough")
		if !c.DedicatedCPUPlacement {
			allErrs = append(allErrs, field.Invalid(p, "{}", "needs spec.domain.cpu.dedicatedCpuPlacement: true"))
		}
		if !hugepages {
			allErrs = append(allErrs, field.Invalid(p, "{}", "needs spec.domain.memory.hugepages"))
		}
	}
	if rt := c.Realtime; rt != nil {
		p := cpuPath.Child("realtime")
		if !c.DedicatedCPUPlacement {
			allErrs = append(allErrs, field.Required(cpuPath.Child("dedicatedCpuPlacement"), "must be true when spec.domain.cpu.realtime is used"))
		}
		if c.NUMA == nil || c.NUMA.GuestMappingPassthrough == nil {
			allErrs = append(allErrs, field.Required(cpuPath.Child("numa", "guestMappingPassthrough"), "must be defined when spec.domain.cpu.realtime is used"))
		}
		vcpus := uint64(max(c.Sockets, 1)) * uint64(max(c.Cores, 1)) * uint64(max(c.Threads, 1))
		if vcpus > uint64(MaxVCPUs) {
			// too many vCPUs: reported with spec.domain.cpu
		} else if _, err := ParseRealtimeMask(rt.Mask, int(vcpus)); err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("mask"), rt.Mask, err.Error()))
		}
	}
	if c.DedicatedCPUPlacement {
		allErrs = append(allErrs, validateDedicatedCPUs(d, &c, fldPath)...)
	}
	if hugepages {
		allErrs = append(allErrs, validateHugepages(d, fldPath.Child("memory"))...)
	}
	return allErrs
}

// validateDedicatedCPUs: whole CPUs, one per vCPU, requests equal to limits
// (the launcher Pod must be Guaranteed); at most 2 threads per core.
func validateDedicatedCPUs(d *v1.DomainSpec, c *v1.CPU, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	vcpus := int64(max(c.Sockets, 1)) * int64(max(c.Cores, 1)) * int64(max(c.Threads, 1))
	res := fldPath.Child("resources")
	for _, r := range []struct {
		name string
		list corev1.ResourceList
	}{{"requests", d.Resources.Requests}, {"limits", d.Resources.Limits}} {
		q, ok := r.list[corev1.ResourceCPU]
		if !ok {
			continue
		}
		p := res.Child(r.name, string(corev1.ResourceCPU))
		switch {
		case q.MilliValue()%1000 != 0:
			allErrs = append(allErrs, field.Invalid(p, q.String(), "must be a whole number of CPUs with dedicatedCpuPlacement"))
		case q.Value() != vcpus:
			allErrs = append(allErrs, field.Invalid(p, q.String(),
				fmt.Sprintf("must equal the vCPUs (sockets*cores*threads = %d) with dedicatedCpuPlacement, or be left unset", vcpus)))
		}
	}
	req, rok := d.Resources.Requests[corev1.ResourceMemory]
	lim, lok := d.Resources.Limits[corev1.ResourceMemory]
	if rok && lok && req.Cmp(lim) != 0 {
		allErrs = append(allErrs, field.Invalid(res.Child("requests", string(corev1.ResourceMemory)), req.String(),
			fmt.Sprintf("must equal limits.memory (%s) with dedicatedCpuPlacement (the Pod is Guaranteed)", lim.String())))
	}
	if c.Threads > 2 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("cpu", "threads"), c.Threads,
			"must be at most 2 with dedicatedCpuPlacement"))
	}
	return allErrs
}

// validateHugepages: the page size is 2Mi or 1Gi and the guest memory a
// whole number of pages (at least one).
func validateHugepages(d *v1.DomainSpec, memPath *field.Path) field.ErrorList {
	p := memPath.Child("hugepages", "pageSize")
	size := d.Memory.Hugepages.PageSize
	if size != HugepageSize2Mi && size != HugepageSize1Gi {
		return field.ErrorList{field.NotSupported(p, size, []string{HugepageSize2Mi, HugepageSize1Gi})}
	}
	pq := resource.MustParse(size)
	page := pq.Value()
	guest := d.Memory.Guest
	if guest == nil {
		return nil // reported by validateResources
	}
	gp := memPath.Child("guest")
	switch g := guest.Value(); {
	case g < page:
		return field.ErrorList{field.Invalid(gp, guest.String(), fmt.Sprintf("must be at least the hugepage size %s", size))}
	case g%page != 0:
		return field.ErrorList{field.Invalid(gp, guest.String(), fmt.Sprintf("must be a multiple of the hugepage size %s", size))}
	}
	return nil
}

// ParseRealtimeMask reads a realtime vCPU mask in libvirt's syntax
// ("0-3,^1", "0,2,3"; empty: every vCPU) and returns, for each of vcpus,
// whether it is realtime. Every vCPU named must exist.
func ParseRealtimeMask(mask string, vcpus int) ([]bool, error) {
	out := make([]bool, vcpus)
	if strings.TrimSpace(mask) == "" {
		for i := range out {
			out[i] = true
		}
		return out, nil
	}
	if len(mask) > MaxRealtimeMaskLength {
		return nil, fmt.Errorf("longer than %d characters", MaxRealtimeMaskLength)
	}
	num := func(s string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a vCPU number", s)
		}
		if n >= vcpus {
			return 0, fmt.Errorf("vCPU %d does not exist (the VM has %d)", n, vcpus)
		}
		return n, nil
	}
	picked := false
	for _, part := range strings.Split(mask, ",") {
		part = strings.TrimSpace(part)
		if rest, ok := strings.CutPrefix(part, "^"); ok {
			n, err := num(rest)
			if err != nil {
				return nil, err
			}
			out[n] = false
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := num(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = num(hi); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("range %q runs backwards", part)
			}
		}
		for i := a; i <= b; i++ {
			out[i] = true
		}
		picked = true
	}
	if !picked {
		return nil, fmt.Errorf("selects no vCPU")
	}
	return out, nil
}
