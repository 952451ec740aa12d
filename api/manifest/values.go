package manifest

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// badValue is a value of the document its Go field cannot hold.
type badValue struct {
	err *field.Error
	// clear removes the value from the generic document (a map key is
	// deleted, a list item becomes null, so other items keep their
	// indexes).
	clear func()
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	quantityType    = reflect.TypeFor[resource.Quantity]()
)

// badValues walks v, a document decoded into generic JSON values, along t,
// the Go type it decodes into, and returns every value t cannot hold, with
// its path as written: a string where a number belongs, a malformed
// quantity, an object where a list belongs. encoding/json stops at the
// first such value and names no path for errors of a json.Unmarshaler
// (resource.Quantity's), so the walk decodes each value on its own. Fields
// t does not have are left to the strict decoder.
func badValues(v any, t reflect.Type) []badValue {
	var out []badValue
	walkValue(v, t, nil, func() {}, &out)
	return out
}

func walkValue(v any, t reflect.Type, p *field.Path, clear func(), out *[]badValue) {
	if v == nil {
		return // null leaves any field at its zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bad := func(detail string) {
		*out = append(*out, badValue{err: field.Invalid(p, shownValue(v), detail), clear: clear})
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		if err := decodeLeaf(v, t); err != nil {
			bad(leafDetail(err, t))
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			bad("must be an object")
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			if ft, ok := fields[k]; ok {
				walkValue(m[k], ft, child(p, k), func() { delete(m, k) }, out)
			}
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			bad("must be an object")
			return
		}
		for _, k := range sortedKeys(m) {
			walkValue(m[k], t.Elem(), child(p, k), func() { delete(m, k) }, out)
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 { // []byte: a base64 string
			if err := decodeLeaf(v, t); err != nil {
				bad(leafDetail(err, t))
			}
			return
		}
		l, ok := v.([]any)
		if !ok {
			bad("must be a list")
			return
		}
		for i := range l {
			walkValue(l[i], t.Elem(), indexPath(p, i), func() { l[i] = nil }, out)
		}
	case reflect.Interface:
	default:
		if err := decodeLeaf(v, t); err != nil {
			bad(leafDetail(err, t))
		}
	}
}

// decodeLeaf decodes v alone into a new value of type t.
func decodeLeaf(v any, t reflect.Type) error {
	js, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(js, reflect.New(t).Interface())
}

// leafDetail says what t takes, or, for a type with its own decoding (a
// quantity, a time), what its decoder said.
func leafDetail(err error, t reflect.Type) string {
	if t == quantityType {
		return "must be a quantity such as 512Mi, 1Gi or 1G (suffixes are case-sensitive): " + err.Error()
	}
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	switch t.Kind() {
	case reflect.String:
		return "must be a string"
	case reflect.Bool:
		return "must be true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("must be an integer from %d to %d", int64(-1)<<(bits-1), int64(1)<<(bits-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("must be an integer from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	case reflect.Float32, reflect.Float64:
		return "must be a number"
	case reflect.Slice:
		return "must be a base64 string"
	}
	return "must be of type " + t.String()
}

// shownValue is the value as an error shows it: strings as written, other
// scalars as they are, objects and lists by their kind (they can be large).
func shownValue(v any) any {
	switch v.(type) {
	case map[string]any:
		return "<object>"
	case []any:
		return "<list>"
	}
	return v
}

// jsonFields maps the JSON names of t's fields to their types, with the
// fields of embedded structs without a name promoted, as encoding/json
// decodes them (case-sensitively, as the strict decoder matches them).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			for k, v := range jsonFields(ft) {
				if _, shadowed := fields[k]; !shadowed {
					fields[k] = v
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func child(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

func indexPath(p *field.Path, i int) *field.Path {
	if p == nil {
		return field.NewPath("").Index(i)
	}
	return p.Index(i)
}
