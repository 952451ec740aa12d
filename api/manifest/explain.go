package manifest

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/kemu-dev/kemu/api/v1alpha1"
)

// Support says what kemu does with a field of a KubeVirt kind.
type Support string

// Supports.
const (
	// Supported: kemu reads the field with KubeVirt's meaning (a value of
	// it may still be refused, e.g. ioThreadsPolicy: supplementalPool).
	Supported Support = "supported"
	// Unsupported: a KubeVirt field kemu refuses by name.
	Unsupported Support = "not supported"
	// KemuOnly: kemu's field, not KubeVirt's.
	KemuOnly Support = "kemu only"
)

// Field is one field of an Explain listing.
type Field struct {
	// Path from the kind's root, e.g. "spec.domain.devices.disks[].cache".
	Path    string
	Support Support
	// Nested says the field holds fields of its own (a list of objects, an
	// object or a map of objects).
	Nested bool
}

// explainKinds maps what kemuctl explain takes to a kind.
var explainKinds = map[string]string{
	"vmi": KindVMI, "vmis": KindVMI, "virtualmachineinstance": KindVMI, "virtualmachineinstances": KindVMI,
	"vm": KindVM, "vms": KindVM, "virtualmachine": KindVM, "virtualmachines": KindVM,
	"vmim": KindMigration, "vmims": KindMigration, "virtualmachineinstancemigration": KindMigration, "virtualmachineinstancemigrations": KindMigration,
}

var kemuRoots = map[string]reflect.Type{
	KindVMI:       reflect.TypeFor[v1alpha1.VirtualMachineInstance](),
	KindVM:        reflect.TypeFor[v1alpha1.VirtualMachine](),
	KindMigration: reflect.TypeFor[v1alpha1.VirtualMachineInstanceMigration](),
}

var unsupportedField = reflect.TypeFor[v1alpha1.UnsupportedField]()

// SchemaSource names the KubeVirt release Explain and IsKubeVirtField
// compare with.
func SchemaSource() string { return kubeVirtSchemaSource }

// Explain lists the fields under what (a kind such as "vmi" or "vm",
// optionally followed by a field path: "vmi.spec.domain.devices",
// "vm.spec.template.spec.volumes"), KubeVirt's (KubeVirt v1.9.0's v1 schema)
// and kemu's own, each with what kemu does with it; recursive goes down
// every level. Status and metadata are not listed.
func Explain(what string, recursive bool) ([]Field, error) {
	name, path, _ := strings.Cut(what, ".")
	kind, ok := explainKinds[strings.ToLower(name)]
	if !ok {
		return nil, fmt.Errorf("%q is not a kind kemu explains: vmi, vm or vmim", name)
	}
	kv, kt := kubeVirtRoots[kind], kemuRoots[kind]
	prefix := ""
	for _, step := range strings.Split(path, ".") {
		if step == "" {
			continue
		}
		step = strings.TrimSuffix(step, "[]")
		nkv, nkt, known := explainChild(kv, kt, step)
		if !known {
			return nil, fmt.Errorf("%s has no field %q (in KubeVirt's kubevirt.io/v1 or kemu's kemu.dev/v1alpha1)", strings.TrimSuffix(kind+"."+prefix, "."), step)
		}
		kv, kt = nkv, nkt
		prefix += step + listSuffix(nkv, nkt) + "."
	}
	var out []Field
	explain(kv, kt, prefix, recursive, &out)
	return out, nil
}

// explainChild steps into field name of the KubeVirt definition kv and kemu's type
// kt (either may be absent: "" and nil).
func explainChild(kv string, kt reflect.Type, name string) (string, reflect.Type, bool) {
	var nkv string
	var okv bool
	if def := elemDef(kv); def != "" {
		nkv, okv = kubeVirtSchema[def][name]
	}
	var nkt reflect.Type
	if t := elemType(kt); t != nil && t.Kind() == reflect.Struct {
		if ft, ok := jsonField(t, name); ok && !ft.Implements(unsupportedField) {
			nkt = ft
		}
	}
	return nkv, nkt, okv || nkt != nil
}

func explain(kv string, kt reflect.Type, prefix string, recursive bool, out *[]Field) {
	names := map[string]bool{}
	if def := elemDef(kv); def != "" {
		for n := range kubeVirtSchema[def] {
			names[n] = true
		}
	}
	t := elemType(kt)
	if t != nil && t.Kind() == reflect.Struct {
		for n := range jsonFields(t) {
			names[n] = true
		}
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if prefix == "" && (n == "status" || n == "metadata" || n == "apiVersion" || n == "kind") {
			continue
		}
		nkv, inKubeVirt := "", false
		if def := elemDef(kv); def != "" {
			nkv, inKubeVirt = kubeVirtSchema[def][n]
		}
		var nkt reflect.Type
		declared, unsupported := false, false
		if t != nil && t.Kind() == reflect.Struct {
			if ft, ok := jsonField(t, n); ok {
				declared = true
				unsupported = ft.Implements(unsupportedField)
				if !unsupported {
					nkt = ft
				}
			}
		}
		s := Supported
		switch {
		case !declared || unsupported:
			s = Unsupported
		case !inKubeVirt:
			s = KemuOnly
		}
		nested := elemDef(nkv) != "" || (nkt != nil && elemType(nkt).Kind() == reflect.Struct && elemType(nkt).PkgPath() == kemuRoots[KindVMI].PkgPath())
		p := prefix + n + listSuffix(nkv, nkt)
		*out = append(*out, Field{Path: p, Support: s, Nested: nested})
		if recursive && nested && s != Unsupported {
			explain(nkv, nkt, p+".", true, out)
		}
	}
}

// elemDef is the definition a schema entry holds, through lists and maps
// ("" for a scalar).
func elemDef(kv string) string {
	for strings.HasPrefix(kv, "[]") || strings.HasPrefix(kv, "{}") {
		kv = kv[2:]
	}
	if _, ok := kubeVirtSchema[kv]; !ok {
		return ""
	}
	return kv
}

// elemType is the struct (or scalar) a Go type holds, through pointers,
// slices and maps.
func elemType(t reflect.Type) reflect.Type {
	for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map) {
		t = t.Elem()
	}
	return t
}

func listSuffix(kv string, kt reflect.Type) string {
	if strings.HasPrefix(kv, "[]") || (kt != nil && kt.Kind() == reflect.Slice) {
		return "[]"
	}
	return ""
}

func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	ft, ok := jsonFields(t)[name]
	return ft, ok
}
