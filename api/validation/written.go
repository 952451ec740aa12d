package validation

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// AsWritten moves the errors of a defaulted object's validation to the
// fields its author wrote. obj is the defaulted *VirtualMachineInstance or
// *VirtualMachine that was validated, written the same object as sent (its
// generic JSON, before defaulting). An error on a field that defaulting
// filled in is reported where the value came from:
//   - memory.guest taken from resources.limits.memory or
//     resources.requests.memory: at that field (a guest of 16Mi written as
//     requests.memory is too small at spec.domain.resources.requests.memory);
//   - resources.requests.memory taken from memory.guest: at memory.guest;
//   - a disk added for a volume without one: at that volume
//     (spec.volumes[2]), saying so;
//
// and any other error on a path the author did not write (a defaulted
// interface, bus or network) at the nearest enclosing field they did
// write, the detail naming the defaulted field. Errors on written paths,
// Required errors (about what is missing) but for memory.guest's, and
// errors of other objects (not defaulted) are left as they are.
func AsWritten(errs field.ErrorList, obj any, written map[string]any) field.ErrorList {
	var spec *v1.VirtualMachineInstanceSpec
	var specPath string
	switch o := obj.(type) {
	case *v1.VirtualMachineInstance:
		spec, specPath = &o.Spec, "spec"
	case *v1.VirtualMachine:
		if o.Spec.Template != nil {
			spec, specPath = &o.Spec.Template.Spec, "spec.template.spec"
		}
	default:
		return errs
	}
	type key struct {
		typ           field.ErrorType
		field, detail string
		value         string
	}
	seen := map[key]bool{}
	for _, e := range errs {
		seen[key{e.Type, e.Field, e.Detail, fmt.Sprint(e.BadValue)}] = true
	}
	out := make(field.ErrorList, 0, len(errs))
	for _, e := range errs {
		w := asWritten(e, spec, specPath, written)
		// A defaulted disk's error its volume already has (an invalid
		// name is both's) is said once.
		if w != e && seen[key{e.Type, w.Field, e.Detail, fmt.Sprint(e.BadValue)}] {
			continue
		}
		out = append(out, w)
	}
	return out
}

func asWritten(e *field.Error, spec *v1.VirtualMachineInstanceSpec, specPath string, written map[string]any) *field.Error {
	steps := SplitPath(e.Field)
	if e.Field == "" || e.Field == "<nil>" || present(written, steps) {
		return e
	}
	moved := func(to, note string) *field.Error {
		c := *e
		c.Field = to
		if note != "" {
			c.Detail = strings.TrimSpace(c.Detail + " (" + note + ")")
		}
		return &c
	}
	if spec != nil && (e.Type != field.ErrorTypeRequired || underPath(e.Field, specPath+".domain.memory.guest")) {
		if rel, ok := strings.CutPrefix(e.Field, specPath+"."); ok {
			memory := specPath + ".domain.resources.limits.memory"
			requests := specPath + ".domain.resources.requests.memory"
			guest := specPath + ".domain.memory.guest"
			switch {
			case underPath(rel, "domain.memory.guest"):
				for _, from := range []string{memory, requests} {
					if present(written, SplitPath(from)) {
						return moved(from, "")
					}
				}
			case underPath(rel, "domain.resources.requests.memory") || underPath(rel, "domain.resources.requests[memory]"):
				if present(written, SplitPath(guest)) {
					return moved(guest, "")
				}
			case underPath(rel, "domain.devices.disks") && !present(written, SplitPath(specPath+"."+diskOf(rel))):
				if to, ok := diskVolume(rel, spec); ok {
					return moved(specPath+"."+to, "on "+e.Field+", the disk kemu adds for this volume")
				}
			}
		}
	}
	if e.Type == field.ErrorTypeRequired {
		return e
	}
	// The nearest enclosing field that was written.
	for n := len(steps) - 1; n >= 0; n-- {
		if present(written, steps[:n]) {
			return moved(joinPath(steps[:n]), "at "+e.Field+", which kemu's defaults set")
		}
	}
	return e
}

// diskVolume is the path of the volume a defaulted disk was added for,
// "volumes[j]" (or "volumes[j].name" for an error on the disk's name), from
// rel, a path under "domain.devices.disks".
func diskVolume(rel string, spec *v1.VirtualMachineInstanceSpec) (string, bool) {
	steps := SplitPath(rel)
	if len(steps) < 4 || !steps[3].IsIndex || steps[3].Index >= len(spec.Domain.Devices.Disks) {
		return "", false
	}
	name := spec.Domain.Devices.Disks[steps[3].Index].Name
	for j, v := range spec.Volumes {
		if v.Name == name {
			to := fmt.Sprintf("volumes[%d]", j)
			if len(steps) == 5 && steps[4].Name == "name" {
				to += ".name"
			}
			return to, true
		}
	}
	return "", false
}

// diskOf is the disk's own path, "domain.devices.disks[i]", of rel, a path
// under it.
func diskOf(rel string) string {
	steps := SplitPath(rel)
	if len(steps) < 4 {
		return rel
	}
	return joinPath(steps[:4])
}

// PathStep is one step of a field path: a field name, a map key (Keyed:
// written in brackets), or a list index.
type PathStep struct {
	Name    string
	Keyed   bool
	Index   int
	IsIndex bool
}

// SplitPath splits a field path as field.Path and the strict JSON decoder
// write it ("a.b[0].c[key]") into its steps. A key in brackets may hold
// dots (metadata.annotations[example.com/x]). It is the one parser of such
// paths: api/manifest uses it too.
func SplitPath(s string) []PathStep {
	var steps []PathStep
	for s != "" {
		switch s[0] {
		case '.':
			s = s[1:]
		case '[':
			key, rest, _ := strings.Cut(s[1:], "]")
			if i, err := strconv.Atoi(key); err == nil {
				steps = append(steps, PathStep{Index: i, IsIndex: true})
			} else {
				steps = append(steps, PathStep{Name: key, Keyed: true})
			}
			s = rest
		default:
			n := strings.IndexAny(s, ".[")
			if n < 0 {
				n = len(s)
			}
			steps = append(steps, PathStep{Name: s[:n]})
			s = s[n:]
		}
	}
	return steps
}

// FieldPath turns steps back into a *field.Path (nil for none).
func FieldPath(steps []PathStep) *field.Path {
	var p *field.Path
	for _, s := range steps {
		switch {
		case p == nil && s.IsIndex:
			continue // no field to index
		case p == nil:
			p = field.NewPath(s.Name)
		case s.IsIndex:
			p = p.Index(s.Index)
		case s.Keyed:
			p = p.Key(s.Name)
		default:
			p = p.Child(s.Name)
		}
	}
	return p
}

func joinPath(steps []PathStep) string {
	var b strings.Builder
	for i, s := range steps {
		switch {
		case s.IsIndex:
			fmt.Fprintf(&b, "[%d]", s.Index)
		case s.Keyed:
			b.WriteString("[" + s.Name + "]")
		case i > 0:
			b.WriteString("." + s.Name)
		default:
			b.WriteString(s.Name)
		}
	}
	return b.String()
}

// present says whether the generic JSON object obj has a value at steps.
func present(obj map[string]any, steps []PathStep) bool {
	var cur any = obj
	for _, s := range steps {
		switch c := cur.(type) {
		case map[string]any:
			if s.IsIndex {
				return false
			}
			v, ok := c[s.Name]
			if !ok {
				return false
			}
			cur = v
		case []any:
			if !s.IsIndex || s.Index < 0 || s.Index >= len(c) {
				return false
			}
			cur = c[s.Index]
		default:
			return false
		}
	}
	return true
}

// underPath says whether path p is q or inside it.
func underPath(p, q string) bool {
	rest, ok := strings.CutPrefix(p, q)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}
