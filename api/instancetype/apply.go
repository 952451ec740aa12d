// Package instancetype expands a VirtualMachine's instance type and
// preference into the VMI it starts, with KubeVirt's rules: the VM may not
// set what its instance type sets (a conflict, reported with the VM field's
// path), a preference fills in only what the VM leaves unset, and a
// preference's requirements must be met. It is pure: finding the objects
// and keeping their revisions is kube/instancetypes'. See docs/vm.md.
package instancetype

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// ConflictDetail is the message of every conflict between a VM and its
// instance type (KubeVirt's "VM field(s) … conflicts with selected instance
// type").
const ConflictDetail = "VM field conflicts with selected instance type"

// TemplatePath is where a VM holds the VMI it starts; conflicts are
// reported under it.
var TemplatePath = field.NewPath("spec", "template")

// Apply expands the instance type and the preference (either may be nil)
// into a VMI's spec and metadata, which must not be defaulted yet (defaults
// would conflict). On any error nothing should be used: the errors are the
// conflicts with the instance type, the preference's unmet requirements and
// an instance type whose vCPUs the preferred spread cannot lay out, each
// with the VM field's path under TemplatePath.
func Apply(it *itv1beta1.VirtualMachineInstancetypeSpec, pref *itv1beta1.VirtualMachinePreferenceSpec,
	spec *v1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta) field.ErrorList {
	if it == nil && pref == nil {
		return nil
	}
	if errs := checkSpread(it, pref); len(errs) > 0 {
		return errs
	}
	if errs := checkRequirements(it, pref, spec); len(errs) > 0 {
		return errs
	}
	if it != nil {
		if errs := applyInstancetype(it, pref, spec, meta); len(errs) > 0 {
			return errs
		}
	}
	if pref != nil {
		applyPreference(pref, spec, meta)
	}
	return nil
}

func applyInstancetype(it *itv1beta1.VirtualMachineInstancetypeSpec, pref *itv1beta1.VirtualMachinePreferenceSpec,
	spec *v1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta) field.ErrorList {
	base := TemplatePath.Child("spec")
	domain := base.Child("domain")
	var errs field.ErrorList
	conflict := func(p *field.Path) { errs = append(errs, field.Forbidden(p, ConflictDetail)) }

	if it.NodeSelector != nil && spec.NodeSelector != nil {
		conflict(base.Child("nodeSelector"))
	}

	// CPU: every conflict is reported.
	d := &spec.Domain
	for _, r := range []struct {
		list corev1.ResourceList
		name string
	}{{d.Resources.Requests, "requests"}, {d.Resources.Limits, "limits"}} {
		if _, ok := r.list[corev1.ResourceCPU]; ok {
			conflict(domain.Child("resources", r.name, string(corev1.ResourceCPU)))
		}
	}
	if c := d.CPU; c != nil {
		if c.Sockets != 0 {
			conflict(domain.Child("cpu", "sockets"))
		}
		if c.Cores != 0 {
			conflict(domain.Child("cpu", "cores"))
		}
		if c.Threads != 0 {
			conflict(domain.Child("cpu", "threads"))
		}
		if c.Model != "" && it.CPU.Model != nil {
			conflict(domain.Child("cpu", "model"))
		}
		if c.DedicatedCPUPlacement && it.CPU.DedicatedCPUPlacement != nil {
			conflict(domain.Child("cpu", "dedicatedCpuPlacement"))
		}
		if c.IsolateEmulatorThread && it.CPU.IsolateEmulatorThread != nil {
			conflict(domain.Child("cpu", "isolateEmulatorThread"))
		}
		if c.NUMA != nil && it.CPU.NUMA != nil {
			conflict(domain.Child("cpu", "numa"))
		}
		if c.Realtime != nil && it.CPU.Realtime != nil {
			conflict(domain.Child("cpu", "realtime"))
		}
	}

	// Memory: the first conflict only, as KubeVirt reports it.
	switch {
	case d.Memory != nil && d.Memory.Hugepages != nil && it.Memory.Hugepages != nil:
		conflict(domain.Child("memory", "hugepages"))
	case d.Memory != nil && d.Memory.Guest != nil:
		conflict(domain.Child("memory", "guest"))
	case hasResource(d.Resources.Requests, corev1.ResourceMemory):
		conflict(domain.Child("resources", "requests", string(corev1.ResourceMemory)))
	case hasResource(d.Resources.Limits, corev1.ResourceMemory):
		conflict(domain.Child("resources", "limits", string(corev1.ResourceMemory)))
	}

	annotations := TemplatePath.Child("metadata", "annotations")
	for k, v := range it.Annotations {
		if cur, ok := meta.Annotations[k]; ok && cur != v {
			conflict(annotations.Key(k))
		}
	}
	if len(errs) > 0 {
		return errs
	}

	if it.NodeSelector != nil {
		spec.NodeSelector = maps.Clone(it.NodeSelector)
	}
	if d.CPU == nil {
		d.CPU = &v1.CPU{}
	}
	if it.CPU.Model != nil {
		d.CPU.Model = *it.CPU.Model
	}
	d.CPU.Sockets, d.CPU.Cores, d.CPU.Threads = Topology(it.CPU.Guest, pref)
	if it.CPU.DedicatedCPUPlacement != nil {
		d.CPU.DedicatedCPUPlacement = *it.CPU.DedicatedCPUPlacement
	}
	if it.CPU.IsolateEmulatorThread != nil {
		d.CPU.IsolateEmulatorThread = *it.CPU.IsolateEmulatorThread
	}
	if it.CPU.NUMA != nil {
		d.CPU.NUMA = it.CPU.NUMA.DeepCopy()
	}
	if it.CPU.Realtime != nil {
		d.CPU.Realtime = it.CPU.Realtime.DeepCopy()
	}

	if d.Memory == nil {
		d.Memory = &v1.Memory{}
	}
	guest := it.Memory.Guest.DeepCopy()
	d.Memory.Guest = &guest
	if it.Memory.Hugepages != nil {
		d.Memory.Hugepages = it.Memory.Hugepages.DeepCopy()
	}
	if pct := it.Memory.OvercommitPercent; pct > 0 {
		if d.Resources.Requests == nil {
			d.Resources.Requests = corev1.ResourceList{}
		}
		req := guest.Value() * int64(100-pct) / 100
		d.Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(req, guest.Format)
	}

	if len(it.Annotations) > 0 && meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	maps.Copy(meta.Annotations, it.Annotations)
	return nil
}

func hasResource(l corev1.ResourceList, name corev1.ResourceName) bool {
	_, ok := l[name]
	return ok
}

// PreferredTopology is the preference's CPU topology, sockets by default.
func PreferredTopology(pref *itv1beta1.VirtualMachinePreferenceSpec) itv1beta1.PreferredCPUTopology {
	if pref != nil && pref.CPU != nil && pref.CPU.PreferredCPUTopology != nil {
		return *pref.CPU.PreferredCPUTopology
	}
	return itv1beta1.Sockets
}

// defaultSpreadRatio is KubeVirt's ratio of the spread topology.
const defaultSpreadRatio uint32 = 2

// threadsPerCore of the SocketsCoresThreads spread.
const threadsPerCore uint32 = 2

// SpreadOptions are the spread topology's ratio and target.
func SpreadOptions(pref *itv1beta1.VirtualMachinePreferenceSpec) (uint32, itv1beta1.SpreadAcross) {
	ratio, across := defaultSpreadRatio, itv1beta1.SpreadAcrossSocketsCores
	if pref == nil {
		return ratio, across
	}
	if pref.PreferSpreadSocketToCoreRatio != 0 {
		ratio = pref.PreferSpreadSocketToCoreRatio
	}
	if pref.CPU != nil && pref.CPU.SpreadOptions != nil {
		if a := pref.CPU.SpreadOptions.Across; a != nil {
			across = *a
		}
		if r := pref.CPU.SpreadOptions.Ratio; r != nil {
			ratio = *r
		}
	}
	return ratio, across
}

// Topology lays vCPUs out as the preference prefers (KubeVirt's rule).
func Topology(vCPUs uint32, pref *itv1beta1.VirtualMachinePreferenceSpec) (sockets, cores, threads uint32) {
	sockets, cores, threads = 1, 1, 1
	if vCPUs <= 1 {
		return
	}
	switch PreferredTopology(pref) {
	case itv1beta1.Cores, itv1beta1.DeprecatedPreferCores:
		cores = vCPUs
	case itv1beta1.Threads, itv1beta1.DeprecatedPreferThreads:
		threads = vCPUs
	case itv1beta1.Spread, itv1beta1.DeprecatedPreferSpread:
		ratio, across := SpreadOptions(pref)
		switch across {
		case itv1beta1.SpreadAcrossSocketsCores:
			cores, sockets = ratio, vCPUs/ratio
		case itv1beta1.SpreadAcrossCoresThreads:
			threads, cores = ratio, vCPUs/ratio
		case itv1beta1.SpreadAcrossSocketsCoresThreads:
			threads, cores, sockets = threadsPerCore, ratio, vCPUs/threadsPerCore/ratio
		}
	default: // sockets, any
		sockets = vCPUs
	}
	return
}

// checkSpread refuses an instance type whose vCPUs the preferred spread
// cannot lay out evenly (KubeVirt reports it at instancetype.spec.cpu.guest).
func checkSpread(it *itv1beta1.VirtualMachineInstancetypeSpec, pref *itv1beta1.VirtualMachinePreferenceSpec) field.ErrorList {
	t := PreferredTopology(pref)
	if it == nil || (t != itv1beta1.Spread && t != itv1beta1.DeprecatedPreferSpread) {
		return nil
	}
	ratio, across := SpreadOptions(pref)
	n := it.CPU.Guest
	p := field.NewPath("instancetype", "spec", "cpu", "guest")
	switch {
	case ratio == 0:
		return field.ErrorList{field.Invalid(p, n, "the preference's spread ratio is 0")}
	case across == itv1beta1.SpreadAcrossSocketsCoresThreads && (n%threadsPerCore != 0 || n/threadsPerCore%ratio != 0):
		return field.ErrorList{field.Invalid(p, n, fmt.Sprintf(
			"%d vCPUs of the instance type are not divisible by %d threads per core and the preference's spread ratio %d", n, threadsPerCore, ratio))}
	case across != itv1beta1.SpreadAcrossSocketsCoresThreads && n%ratio != 0:
		return field.ErrorList{field.Invalid(p, n, fmt.Sprintf(
			"%d vCPUs of the instance type are not divisible by the preference's spread ratio %d", n, ratio))}
	}
	return nil
}

// checkRequirements checks the preference's least vCPUs and memory against
// the instance type, or the VM's own CPU and memory without one.
func checkRequirements(it *itv1beta1.VirtualMachineInstancetypeSpec, pref *itv1beta1.VirtualMachinePreferenceSpec,
	spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	if pref == nil || pref.Requirements == nil {
		return nil
	}
	req := pref.Requirements
	var errs field.ErrorList
	itPath := field.NewPath("spec", "instancetype")
	domain := TemplatePath.Child("spec", "domain")
	if req.CPU != nil {
		want := req.CPU.Guest
		switch {
		case it != nil:
			if it.CPU.Guest < want {
				errs = append(errs, field.Invalid(itPath, it.CPU.Guest, fmt.Sprintf(
					"insufficient CPU resources of %d vCPU provided by instance type, preference requires %d vCPU", it.CPU.Guest, want)))
			}
		default:
			errs = append(errs, checkVMCPU(want, pref, spec.Domain.CPU, domain.Child("cpu"))...)
		}
	}
	if req.Memory != nil {
		want := req.Memory.Guest
		switch {
		case it != nil:
			if it.Memory.Guest.Cmp(want) < 0 {
				errs = append(errs, field.Invalid(itPath, it.Memory.Guest.String(), fmt.Sprintf(
					"insufficient Memory resources of %s provided by instance type, preference requires %s", it.Memory.Guest.String(), want.String())))
			}
		default:
			have := resource.MustParse("0")
			if m := spec.Domain.Memory; m != nil && m.Guest != nil {
				have = *m.Guest
			}
			if have.Cmp(want) < 0 {
				errs = append(errs, field.Invalid(domain.Child("memory"), have.String(), fmt.Sprintf(
					"insufficient Memory resources of %s provided by VirtualMachine, preference requires %s", have.String(), want.String())))
			}
		}
	}
	return errs
}

// checkVMCPU is KubeVirt's check of a VM without an instance type: the
// preferred topology's own field must give the vCPUs.
func checkVMCPU(want uint32, pref *itv1beta1.VirtualMachinePreferenceSpec, cpu *v1.CPU, p *field.Path) field.ErrorList {
	if cpu == nil {
		return field.ErrorList{field.Invalid(p, nil, fmt.Sprintf(
			"no CPU resources provided by VirtualMachine, preference requires %d vCPU", want))}
	}
	short := func(have uint32, what string, paths ...*field.Path) field.ErrorList {
		if have >= want {
			return nil
		}
		var errs field.ErrorList
		for _, fp := range paths {
			errs = append(errs, field.Invalid(fp, have, fmt.Sprintf(
				"insufficient CPU resources of %d vCPU provided by VirtualMachine, preference requires %d vCPU provided as %s", have, want, what)))
		}
		return errs
	}
	switch PreferredTopology(pref) {
	case itv1beta1.Threads, itv1beta1.DeprecatedPreferThreads:
		return short(cpu.Threads, "threads", p.Child("threads"))
	case itv1beta1.Cores, itv1beta1.DeprecatedPreferCores:
		return short(cpu.Cores, "cores", p.Child("cores"))
	case itv1beta1.Sockets, itv1beta1.DeprecatedPreferSockets:
		return short(cpu.Sockets, "sockets", p.Child("sockets"))
	case itv1beta1.Spread, itv1beta1.DeprecatedPreferSpread:
		_, across := SpreadOptions(pref)
		switch across {
		case itv1beta1.SpreadAcrossCoresThreads:
			return short(cpu.Cores*cpu.Threads, string(across), p.Child("cores"), p.Child("threads"))
		case itv1beta1.SpreadAcrossSocketsCoresThreads:
			return short(cpu.Sockets*cpu.Cores*cpu.Threads, string(across), p.Child("sockets"), p.Child("cores"), p.Child("threads"))
		default:
			return short(cpu.Sockets*cpu.Cores, string(across), p.Child("sockets"), p.Child("cores"))
		}
	default: // any
		return short(cpu.Sockets*cpu.Cores*cpu.Threads, "cores, sockets and threads", p.Child("cores"), p.Child("sockets"), p.Child("threads"))
	}
}
