package manifest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
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
	for _, g := range []string{"testdata/*/*", "../../examples/*/*.yaml"} {
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
			// Validation judges the object, not how it was written: the
			// errors of the defaulted object are the same. (Errors moves
			// them to the fields as written, and has the strict decoder's
			// and the bad values', which do not survive marshalling.)
			if got, want := keys(back[0].judged), keys(d.judged); !slices.Equal(got, want) {
				t.Fatalf("%s: errors %q after the way back through %s, before %q", d.Describe(), got, js, want)
			}
		}
	})
}
