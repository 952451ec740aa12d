package manifest

import (
	"encoding/json"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kemu-dev/kemu/api/validation"
)

// serverSetMetadata are metadata fields an API server fills in; a converted
// manifest is something to apply, so they are left out.
var serverSetMetadata = []string{"uid", "resourceVersion", "generation", "creationTimestamp",
	"deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"}

// Converted is a kemu manifest made from a KubeVirt (or kemu) document.
type Converted struct {
	// Object is the kemu manifest as a generic map, ready to marshal: what
	// was written, less what cannot be carried over and less status and
	// server-set metadata.
	Object map[string]any
	// Dropped are the paths that could not be carried over, sorted.
	Dropped []string
	// Errors are the document's problems other than dropped fields: what
	// stays wrong in the converted manifest.
	Errors field.ErrorList
}

// Convert makes a kemu manifest of d. It fails only for a document whose
// apiVersion or kind kemu does not serve at all.
func Convert(d *Document) (*Converted, error) {
	if d.Object == nil {
		return nil, fmt.Errorf("%s cannot be converted: %v", d.Describe(), d.Errors.ToAggregate())
	}
	out := &Converted{Object: d.raw}
	dropped := map[string]bool{}
	for _, p := range d.dropped {
		dropped[p.String()] = true
	}
	// Only map keys are deleted, never list items, so indexes in the other
	// paths stay valid.
	paths := make([]string, 0, len(dropped))
	for p := range dropped {
		paths = append(paths, p)
		deletePath(out.Object, p)
	}
	sort.Strings(paths)
	out.Dropped = paths

	delete(out.Object, "status")
	if md, ok := out.Object["metadata"].(map[string]any); ok {
		for _, k := range serverSetMetadata {
			delete(md, k)
		}
	}
	// Judge the result as it will be applied: what is left out can make
	// other fields wrong (an interface whose binding was sriov has none now).
	js, err := json.Marshal(out.Object)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Describe(), err)
	}
	var again map[string]any
	if err := json.Unmarshal(js, &again); err != nil {
		return nil, fmt.Errorf("%s: %w", d.Describe(), err)
	}
	out.Errors = decode(d.Index, again, nil).Errors
	return out, nil
}

// deletePath removes the field at a path like "spec.volumes[0].dataVolume"
// from a generic object. Missing parents are ignored.
func deletePath(obj map[string]any, path string) {
	steps := validation.SplitPath(path)
	var cur any = obj
	for i, s := range steps {
		last := i == len(steps)-1
		switch c := cur.(type) {
		case map[string]any:
			if s.IsIndex {
				return
			}
			if last {
				delete(c, s.Name)
				return
			}
			cur = c[s.Name]
		case []any:
			if !s.IsIndex || s.Index < 0 || s.Index >= len(c) || last {
				return
			}
			cur = c[s.Index]
		default:
			return
		}
	}
}
