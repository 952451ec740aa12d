package validation

import (
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// UnsupportedDetail is the message of every error about a KubeVirt field kemu
// does not implement.
const UnsupportedDetail = "kemu does not support this KubeVirt field"

var (
	unsupportedType = reflect.TypeFor[v1.Unsupported]()
	apiPkgPath      = unsupportedType.PkgPath()
)

// Unsupported walks obj (a kemu API object or part of one) and returns a
// Forbidden error for every Unsupported field that is set, with its JSON path
// under root. It only descends into kemu's own types.
func Unsupported(obj any, root *field.Path) field.ErrorList {
	var errs field.ErrorList
	walkUnsupported(reflect.ValueOf(obj), root, &errs)
	return errs
}

func walkUnsupported(v reflect.Value, p *field.Path, errs *field.ErrorList) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Type().Kind() == reflect.Pointer && v.Type().Elem() == unsupportedType {
			*errs = append(*errs, field.Forbidden(p, UnsupportedDetail))
			return
		}
		walkUnsupported(v.Elem(), p, errs)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().PkgPath() != apiPkgPath {
			return
		}
		for i := 0; i < v.Len(); i++ {
			walkUnsupported(v.Index(i), p.Index(i), errs)
		}
	case reflect.Struct:
		if v.Type().PkgPath() != apiPkgPath {
			return
		}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			child := p
			if name != "" {
				if p == nil {
					child = field.NewPath(name)
				} else {
					child = p.Child(name)
				}
			}
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.PkgPath() != apiPkgPath {
				continue
			}
			walkUnsupported(v.Field(i), child, errs)
		}
	}
}
