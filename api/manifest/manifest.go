// Package manifest reads kemu and KubeVirt manifests (YAML or JSON, one or
// more documents, or a List) into defaulted kemu.dev/v1alpha1 objects and
// instancetype.kemu.dev/v1beta1 instance types and preferences, with
// every problem reported as a field error: unknown fields, KubeVirt fields kemu
// does not support, and validation errors. It also converts KubeVirt manifests
// to kemu ones, saying what could not be carried over.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// KubeVirtGroup is the API group of the manifests kemu can take over.
const KubeVirtGroup = "kubevirt.io"

// UnknownFieldDetail is the message for a field that is neither kemu's nor a
// KubeVirt field kemu knows about.
const UnknownFieldDetail = "unknown field: not part of kemu.dev/v1alpha1"

// Kinds kemu serves.
const (
	KindVMI       = "VirtualMachineInstance"
	KindVM        = "VirtualMachine"
	KindMigration = "VirtualMachineInstanceMigration"
)

// Document is one object read from a manifest.
type Document struct {
	// Index is the document's position in its stream, from 0; List items
	// count as documents of their own.
	Index int
	// APIVersion and Kind as written.
	APIVersion, Kind string
	// Name is metadata.name as written.
	Name string
	// FromKubeVirt is true for a kubevirt.io manifest.
	FromKubeVirt bool
	// Object is the defaulted kemu object (*v1.VirtualMachineInstance,
	// *v1.VirtualMachine, *v1.VirtualMachineInstanceMigration, or one of
	// instancetype.kemu.dev's four kinds), or nil when
	// the document could not be decoded at all.
	Object runtime.Object
	// Errors are every problem found, with field paths.
	Errors field.ErrorList

	// raw is the document as a generic map, apiVersion already kemu's.
	raw map[string]any
	// dropped are the paths that cannot be carried over to kemu.
	dropped []*field.Path
}

// Describe names the document for messages, e.g. "VirtualMachineInstance/testvm".
func (d *Document) Describe() string {
	kind := d.Kind
	if kind == "" {
		kind = "<no kind>"
	}
	name := d.Name
	if name == "" {
		name = "<no name>"
	}
	return kind + "/" + name
}

// Read splits r into documents and decodes each. The error is for input that
// is not YAML or JSON at all; problems inside a document are in its Errors.
func Read(r io.Reader) ([]*Document, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var docs []*Document
	for {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return docs, fmt.Errorf("reading manifest: %w", err)
		}
		if len(bytes.TrimSpace(chunk)) == 0 || isOnlyComments(chunk) {
			continue
		}
		// JSON is kept as written, so duplicate fields are reported with
		// their paths; YAML with a duplicate key is refused by the strict
		// converter, with its line.
		js := bytes.TrimSpace(chunk)
		if js[0] != '{' {
			if js, err = yaml.YAMLToJSONStrict(chunk); err != nil {
				return docs, fmt.Errorf("document %d: %w", len(docs), err)
			}
		}
		if string(bytes.TrimSpace(js)) == "null" {
			continue
		}
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil {
			return docs, fmt.Errorf("document %d is not an object: %w", len(docs), err)
		}
		if kind, _ := obj["kind"].(string); kind == "List" || strings.HasSuffix(kind, "List") && obj["items"] != nil {
			items, _ := obj["items"].([]any)
			for _, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					return docs, fmt.Errorf("document %d: a List item is not an object", len(docs))
				}
				docs = append(docs, decode(len(docs), m, nil))
			}
			continue
		}
		docs = append(docs, decode(len(docs), obj, js))
	}
	return docs, nil
}

func isOnlyComments(chunk []byte) bool {
	for _, line := range strings.Split(string(chunk), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// decode turns one generic document into a Document. js is the document's
// JSON as written, when there is one, so duplicate fields can be reported.
func decode(index int, obj map[string]any, js []byte) *Document {
	d := &Document{Index: index, raw: obj}
	d.APIVersion, _ = obj["apiVersion"].(string)
	d.Kind, _ = obj["kind"].(string)
	if md, ok := obj["metadata"].(map[string]any); ok {
		d.Name, _ = md["name"].(string)
	}

	group, version, _ := strings.Cut(d.APIVersion, "/")
	instancetypes := false
	switch {
	case d.APIVersion == "":
		d.Errors = append(d.Errors, field.Required(field.NewPath("apiVersion"), "kemu.dev/v1alpha1 or kubevirt.io/v1"))
		return d
	case d.APIVersion == v1.APIVersion:
	case group == KubeVirtGroup:
		d.FromKubeVirt = true
		obj["apiVersion"] = v1.APIVersion
	case d.APIVersion == itv1beta1.APIVersion:
		instancetypes = true
	case group == itv1beta1.KubeVirtGroup && version == itv1beta1.SchemeGroupVersion.Version:
		// KubeVirt serves only v1beta1 of its instance types since it
		// removed v1alpha1 and v1alpha2; kemu reads what it serves.
		d.FromKubeVirt, instancetypes = true, true
		obj["apiVersion"] = itv1beta1.APIVersion
	default:
		d.Errors = append(d.Errors, field.NotSupported(field.NewPath("apiVersion"), d.APIVersion,
			[]string{v1.APIVersion, KubeVirtGroup + "/v1", itv1beta1.APIVersion, itv1beta1.KubeVirtGroup + "/v1beta1"}))
		return d
	}

	var target runtime.Object
	switch {
	case d.Kind == "":
		d.Errors = append(d.Errors, field.Required(field.NewPath("kind"), ""))
		return d
	case instancetypes:
		switch d.Kind {
		case itv1beta1.KindInstancetype:
			target = &itv1beta1.VirtualMachineInstancetype{}
		case itv1beta1.KindClusterInstancetype:
			target = &itv1beta1.VirtualMachineClusterInstancetype{}
		case itv1beta1.KindPreference:
			target = &itv1beta1.VirtualMachinePreference{}
		case itv1beta1.KindClusterPreference:
			target = &itv1beta1.VirtualMachineClusterPreference{}
		default:
			d.Errors = append(d.Errors, field.NotSupported(field.NewPath("kind"), d.Kind, []string{itv1beta1.KindInstancetype,
				itv1beta1.KindClusterInstancetype, itv1beta1.KindPreference, itv1beta1.KindClusterPreference}))
			return d
		}
	case d.Kind == KindVMI:
		target = &v1.VirtualMachineInstance{}
	case d.Kind == KindVM:
		target = &v1.VirtualMachine{}
	case d.Kind == KindMigration:
		target = &v1.VirtualMachineInstanceMigration{}
	default:
		d.Errors = append(d.Errors, field.NotSupported(field.NewPath("kind"), d.Kind, []string{KindVMI, KindVM, KindMigration}))
		return d
	}

	if js == nil {
		var err error
		if js, err = json.Marshal(obj); err != nil {
			d.Errors = append(d.Errors, field.InternalError(nil, err))
			return d
		}
	}
	strict, err := sigsjson.UnmarshalStrict(js, target)
	if err != nil {
		d.Errors = append(d.Errors, decodeError(err))
		return d
	}
	for _, se := range strict {
		p := strictErrorPath(se)
		if p == nil {
			d.Errors = append(d.Errors, field.Invalid(nil, nil, se.Error()))
			continue
		}
		if strings.Contains(se.Error(), "duplicate field") {
			d.Errors = append(d.Errors, field.Duplicate(p, "written more than once"))
			continue
		}
		d.Errors = append(d.Errors, field.Forbidden(p, UnknownFieldDetail))
		d.dropped = append(d.dropped, p)
	}

	switch o := target.(type) {
	case *v1.VirtualMachineInstance:
		o.APIVersion = v1.APIVersion
		v1.SetVirtualMachineInstanceDefaults(o)
		d.Errors = append(d.Errors, validation.ValidateVirtualMachineInstance(o)...)
	case *v1.VirtualMachine:
		o.APIVersion = v1.APIVersion
		v1.SetVirtualMachineDefaults(o)
		d.Errors = append(d.Errors, validation.ValidateVirtualMachine(o)...)
	case *v1.VirtualMachineInstanceMigration:
		o.APIVersion = v1.APIVersion
		d.Errors = append(d.Errors, validation.ValidateVirtualMachineInstanceMigration(o)...)
	case *itv1beta1.VirtualMachineInstancetype:
		o.APIVersion = itv1beta1.APIVersion
		d.Errors = append(d.Errors, validation.ValidateInstancetype(o)...)
	case *itv1beta1.VirtualMachineClusterInstancetype:
		o.APIVersion = itv1beta1.APIVersion
		d.Errors = append(d.Errors, validation.ValidateClusterInstancetype(o)...)
	case *itv1beta1.VirtualMachinePreference:
		o.APIVersion = itv1beta1.APIVersion
		d.Errors = append(d.Errors, validation.ValidatePreference(o)...)
	case *itv1beta1.VirtualMachineClusterPreference:
		o.APIVersion = itv1beta1.APIVersion
		d.Errors = append(d.Errors, validation.ValidateClusterPreference(o)...)
	}
	for _, e := range d.Errors {
		if e.Type == field.ErrorTypeForbidden && e.Detail == validation.UnsupportedDetail {
			d.dropped = append(d.dropped, field.NewPath(e.Field))
		}
	}
	d.Object = target
	return d
}

// strictErrorPath returns the field path of an unknown or duplicate field.
func strictErrorPath(err error) *field.Path {
	var fe sigsjson.FieldError
	if !errors.As(err, &fe) {
		return nil
	}
	return parsePath(fe.FieldPath())
}

// decodeError turns a JSON type error into a field error.
func decodeError(err error) *field.Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return field.Invalid(parsePath(te.Field), te.Value, "must be of type "+te.Type.String())
	}
	return field.Invalid(nil, nil, err.Error())
}

// parsePath parses a path such as "spec.volumes[0].dataVolume".
func parsePath(s string) *field.Path {
	var p *field.Path
	for _, part := range strings.Split(s, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name != "" {
			if p == nil {
				p = field.NewPath(name)
			} else {
				p = p.Child(name)
			}
		}
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			var i int
			if _, err := fmt.Sscanf(idx, "%d", &i); err == nil && p != nil {
				p = p.Index(i)
			} else if p != nil {
				p = p.Key(idx)
			}
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return p
}
