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
	"reflect"
	"slices"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
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

// KubeVirtVersions are the versions of KubeVirtGroup kemu reads: those
// KubeVirt serves with kubevirt.io/v1's schema (its CRDs serve v1 and the
// deprecated v1alpha3, one schema for both: KubeVirt's
// staging/src/kubevirt.io/api/core/v1/register.go, ApiSupportedVersions).
var KubeVirtVersions = []string{"v1", "v1alpha3"}

// AcceptedAPIVersions are the apiVersions Read takes: kemu's, then
// KubeVirt's KubeVirtVersions.
func AcceptedAPIVersions() []string {
	out := []string{v1.APIVersion}
	for _, v := range KubeVirtVersions {
		out = append(out, KubeVirtGroup+"/"+v)
	}
	return append(out, itv1beta1.APIVersion, itv1beta1.KubeVirtGroup+"/"+itv1beta1.SchemeGroupVersion.Version)
}

// UnknownFieldDetail is the message for a field that is neither kemu's nor
// KubeVirt's (a typo). A KubeVirt field kemu does not declare is reported
// as every KubeVirt field kemu does not support is, with
// validation.UnsupportedDetail.
const UnknownFieldDetail = "unknown field: not part of kemu.dev/v1alpha1 nor of KubeVirt's kubevirt.io/v1"

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
	// badPaths are the paths of the values that did not fit their fields
	// (left out of Object).
	badPaths []string
	// kubeVirtOnly are the paths of KubeVirt fields kemu's types do not
	// have (left out of Object).
	kubeVirtOnly []string
	// judged are the validation errors of Object, at the paths of the
	// defaulted object (Errors has them where they were written).
	judged field.ErrorList
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
// Documents are separated by "---" lines; a "..." line (YAML's document end
// marker) ends one too, and whatever follows it is read as the next document.
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
		for _, part := range splitDocumentEnds(chunk) {
			if docs, err = readDocument(docs, part); err != nil {
				return docs, err
			}
		}
	}
	return docs, nil
}

// splitDocumentEnds cuts a chunk of the YAML reader (which splits at "---"
// lines only) at its document end markers: "..." at the start of a line,
// alone or followed by white space or a comment. YAML allows a bare
// document after one, which a YAML parser given the whole chunk would not
// read.
func splitDocumentEnds(chunk []byte) [][]byte {
	var parts [][]byte
	start := 0
	for i := 0; i < len(chunk); {
		end := bytes.IndexByte(chunk[i:], '\n')
		if end < 0 {
			end = len(chunk)
		} else {
			end += i + 1
		}
		if rest, ok := bytes.CutPrefix(chunk[i:end], []byte("...")); ok {
			if rest = bytes.TrimLeft(rest, " \t\r\n"); len(rest) == 0 || rest[0] == '#' {
				parts = append(parts, chunk[start:i])
				start = end
			}
		}
		i = end
	}
	return append(parts, chunk[start:])
}

// yamlDocuments counts the YAML documents in a part, so one the splitting
// missed fails instead of being dropped.
func yamlDocuments(part []byte) (int, error) {
	dec := yamlv2.NewDecoder(bytes.NewReader(part))
	n := 0
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// readDocument decodes one document (or the items of a List) and appends
// it to docs.
func readDocument(docs []*Document, chunk []byte) ([]*Document, error) {
	if len(bytes.TrimSpace(chunk)) == 0 || isOnlyComments(chunk) {
		return docs, nil
	}
	// JSON is kept as written, so duplicate fields are reported with
	// their paths; YAML with a duplicate key is refused by the strict
	// converter, with its line.
	js := bytes.TrimSpace(chunk)
	if js[0] != '{' {
		var err error
		if js, err = yaml.YAMLToJSONStrict(chunk); err != nil {
			return docs, fmt.Errorf("document %d: %w", len(docs), err)
		}
		n, err := yamlDocuments(chunk)
		if err != nil {
			return docs, fmt.Errorf("document %d: %w", len(docs), err)
		}
		if n > 1 {
			return docs, fmt.Errorf("document %d: %d YAML documents where one was expected; separate documents with a \"---\" line", len(docs), n)
		}
	}
	if string(bytes.TrimSpace(js)) == "null" {
		return docs, nil
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
		return docs, nil
	}
	return append(docs, decode(len(docs), obj, js)), nil
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
		d.Errors = append(d.Errors, field.Required(field.NewPath("apiVersion"), strings.Join(AcceptedAPIVersions(), ", ")))
		return d
	case d.APIVersion == v1.APIVersion:
	case group == KubeVirtGroup && slices.Contains(KubeVirtVersions, version):
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
		d.Errors = append(d.Errors, field.NotSupported(field.NewPath("apiVersion"), d.APIVersion, AcceptedAPIVersions()))
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
		if strict, err = d.decodeAroundBadValues(js, target); err != nil {
			d.Errors = append(d.Errors, decodeError(err))
			return d
		}
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
		if IsKubeVirtField(d.Kind, p.String()) {
			d.Errors = append(d.Errors, field.Forbidden(p, validation.UnsupportedDetail)) // dropped below
			d.kubeVirtOnly = append(d.kubeVirtOnly, p.String())
			continue
		}
		d.Errors = append(d.Errors, field.Forbidden(p, UnknownFieldDetail))
		d.dropped = append(d.dropped, p)
	}

	var verrs field.ErrorList
	switch o := target.(type) {
	case *v1.VirtualMachineInstance:
		o.APIVersion = v1.APIVersion
		v1.SetVirtualMachineInstanceDefaults(o)
		verrs = validation.ValidateVirtualMachineInstance(o)
	case *v1.VirtualMachine:
		o.APIVersion = v1.APIVersion
		v1.SetVirtualMachineDefaults(o)
		verrs = validation.ValidateVirtualMachine(o)
	case *v1.VirtualMachineInstanceMigration:
		o.APIVersion = v1.APIVersion
		verrs = validation.ValidateVirtualMachineInstanceMigration(o)
	case *itv1beta1.VirtualMachineInstancetype:
		o.APIVersion = itv1beta1.APIVersion
		verrs = validation.ValidateInstancetype(o)
	case *itv1beta1.VirtualMachineClusterInstancetype:
		o.APIVersion = itv1beta1.APIVersion
		verrs = validation.ValidateClusterInstancetype(o)
	case *itv1beta1.VirtualMachinePreference:
		o.APIVersion = itv1beta1.APIVersion
		verrs = validation.ValidatePreference(o)
	case *itv1beta1.VirtualMachineClusterPreference:
		o.APIVersion = itv1beta1.APIVersion
		verrs = validation.ValidateClusterPreference(o)
	}
	d.judged = verrs
	d.Errors = append(d.Errors, d.withoutConsequences(validation.AsWritten(verrs, target, obj))...)
	for _, e := range d.Errors {
		if e.Type == field.ErrorTypeForbidden && e.Detail == validation.UnsupportedDetail {
			d.dropped = append(d.dropped, field.NewPath(e.Field))
		}
	}
	d.Object = target
	return d
}

// decodeAroundBadValues decodes js into target after a decoding error:
// every value target's field cannot hold becomes an error with its path (as
// many as there are), and the rest of the document is decoded without them,
// so its other problems (unknown fields, validation) are reported too. It
// returns the strict decoder's errors (unknown and duplicate fields), or the
// decoding error when no bad value explains it.
func (d *Document) decodeAroundBadValues(js []byte, target runtime.Object) ([]error, error) {
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", d.Describe(), err)
	}
	bad := badValues(generic, reflect.TypeOf(target).Elem())
	if len(bad) == 0 {
		_, err := sigsjson.UnmarshalStrict(js, target)
		return nil, err
	}
	for _, b := range bad {
		d.Errors = append(d.Errors, b.err)
		d.badPaths = append(d.badPaths, b.err.Field)
		b.clear()
	}
	clean, err := json.Marshal(generic)
	if err != nil {
		return nil, fmt.Errorf("decoding %s without its bad values: %w", d.Describe(), err)
	}
	// A partly decoded target keeps what came before the error.
	reflect.ValueOf(target).Elem().SetZero()
	strict, err := sigsjson.UnmarshalStrict(clean, target)
	if err != nil {
		return nil, fmt.Errorf("decoding %s without its bad values: %w", d.Describe(), err)
	}
	// Fields written twice are seen in the document as written only.
	dups, err := sigsjson.UnmarshalStrict(js, new(any), sigsjson.DisallowDuplicateFields)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", d.Describe(), err)
	}
	return append(dups, strict...), nil
}

// withoutConsequences leaves out the validation errors that only repeat
// an error already reported about a value left out of the decoded object:
// those at or under a bad value's path (what validation says of its
// absence), and a Required error on the object holding a KubeVirt field
// kemu's types do not have (a volume whose only source is KubeVirt's
// containerPath "needs a source").
func (d *Document) withoutConsequences(errs field.ErrorList) field.ErrorList {
	var out field.ErrorList
	for _, e := range errs {
		switch {
		case slices.ContainsFunc(d.badPaths, func(b string) bool { return atOrUnder(e.Field, b) }):
		case e.Type == field.ErrorTypeRequired && slices.ContainsFunc(d.kubeVirtOnly, func(k string) bool { return parentPath(k) == e.Field }):
		default:
			out = append(out, e)
		}
	}
	return out
}

// parentPath is the path holding the last field of p: "a.b[0]" of
// "a.b[0].c".
func parentPath(p string) string {
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// atOrUnder says whether path p is path q or a path inside it.
func atOrUnder(p, q string) bool {
	rest, ok := strings.CutPrefix(p, q)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
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
func parsePath(s string) *field.Path { return validation.FieldPath(validation.SplitPath(s)) }
