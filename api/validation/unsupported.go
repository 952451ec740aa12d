package validation

import (
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// UnsupportedDetail is the message of every error about a KubeVirt field kemu
// does not implement.
const UnsupportedDetail = "kemu does not support this KubeVirt field"

var (
	unsupportedField = reflect.TypeFor[v1.UnsupportedField]()
	// apiPkgPaths are the packages of kemu's API types.
	apiPkgPaths = map[string]bool{
		reflect.TypeFor[v1.VirtualMachineInstance]().PkgPath():            true,
		reflect.TypeFor[itv1beta1.VirtualMachineInstancetype]().PkgPath(): true,
	}
)

// Unsupported walks obj (a kemu API object or part of one) and returns a
// Forbidden error for every v1alpha1.UnsupportedField that is set, with its
// JSON path under root. It only descends into kemu's own types.
func Unsupported(obj any, root *field.Path) field.ErrorList {
	var errs field.ErrorList
	walkUnsupported(reflect.ValueOf(obj), root, &errs)
	return errs
}

func walkUnsupported(v reflect.Value, p *field.Path, errs *field.ErrorList) {
	if v.Type().Implements(unsupportedField) {
		if v.Interface().(v1.UnsupportedField).IsSet() {
			*errs = append(*errs, field.Forbidden(p, UnsupportedDetail))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			walkUnsupported(v.Elem(), p, errs)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			walkUnsupported(v.Index(i), p.Index(i), errs)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() || !ownType(f.Type) {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
				continue
			case name == "":
				walkUnsupported(v.Field(i), p, errs) // inlined
			case p == nil:
				walkUnsupported(v.Field(i), field.NewPath(name), errs)
			default:
				walkUnsupported(v.Field(i), p.Child(name), errs)
			}
		}
	}
}

// ownType says whether t (or what it points to or lists) is one of kemu's
// API types, the only ones that can hold Unsupported fields.
func ownType(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer || (t.Kind() == reflect.Slice && t.Name() == "") {
		t = t.Elem()
	}
	return apiPkgPaths[t.PkgPath()]
}
