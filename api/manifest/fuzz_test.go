package manifest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FuzzRead feeds arbitrary bytes (seeded with every manifest of testdata/
// and examples/) through decoding, defaulting and validation: Read and
// Convert never panic, and a decoded object reads back from its own JSON as
// the same object with the same errors (defaulting is idempotent, and
// validation judges the object, not how it was written). make fuzz runs it
// for a fixed time (launcher/cmdline's FuzzManifestArgv carries valid VMIs
// on to QEMU's argv).
func FuzzRead(f *testing.F) {
	var seeds []string
	for _, g := range []string{"testdata/*/*", "../../examples/*.yaml", "../../examples/kubevirt/*"} {
		m, err := filepath.Glob(g)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, m...)
	}
	if len(seeds) == 0 {
		f.Fatal("no seed manifests")
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"a.b"},"spec":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		docs, err := Read(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, d := range docs {
			_ = d.Describe()
			for _, e := range d.Errors {
				_ = e.Error()
			}
			if d.Object == nil {
				continue
			}
			if _, err := Convert(d); err != nil {
				t.Fatalf("Convert of a decoded %s: %v", d.Describe(), err)
			}
			js, err := json.Marshal(d.Object)
			if err != nil {
				t.Fatalf("%s: marshal: %v", d.Describe(), err)
			}
			back, err := Read(bytes.NewReader(js))
			if err != nil || len(back) != 1 {
				t.Fatalf("%s does not read back from %s: %v (%d documents)", d.Describe(), js, err, len(back))
			}
			if !equality.Semantic.DeepEqual(back[0].Object, d.Object) {
				t.Fatalf("%s changed on the way back through %s", d.Describe(), js)
			}
			// Strict-decoding errors (unknown or duplicate fields) are about
			// how it was written and do not survive marshalling; nor do
			// values that did not fit their fields and KubeVirt fields kemu's
			// types do not have, left out of the object (with what
			// validation says of their absence).
			if len(d.badPaths) > 0 || len(d.kubeVirtOnly) > 0 {
				continue
			}
			if got, want := keys(back[0].Errors), keys(withoutDecodeErrors(d)); !slices.Equal(got, want) {
				t.Fatalf("%s: errors %q after the way back through %s, before %q", d.Describe(), got, js, want)
			}
		}
	})
}

// withoutDecodeErrors are d's errors less those about how the document was
// written: unknown fields, fields written twice, strict-decoding errors
// without a path.
func withoutDecodeErrors(d *Document) field.ErrorList {
	var out field.ErrorList
	for _, e := range d.Errors {
		switch {
		case e.Type == field.ErrorTypeForbidden && e.Detail == UnknownFieldDetail:
		case e.Type == field.ErrorTypeDuplicate && e.BadValue == "written more than once":
		case e.Field == "<nil>" || e.Field == "":
		default:
			out = append(out, e)
		}
	}
	return out
}
