package manifest

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkReadKubeVirtVM measures decoding, defaulting and validating one
// KubeVirt VirtualMachine manifest: what every component pays per object.
func BenchmarkReadKubeVirtVM(b *testing.B) {
	data, err := os.ReadFile("testdata/kubevirt/vm-disks.json")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		docs, err := Read(bytes.NewReader(data))
		if err != nil || len(docs) != 1 || len(docs[0].Errors) != 0 {
			b.Fatalf("%v %v", err, docs)
		}
	}
}

// BenchmarkConvertKubeVirtVMI measures kemuctl convert's work for one VMI.
func BenchmarkConvertKubeVirtVMI(b *testing.B) {
	data, err := os.ReadFile("testdata/bad/unsupported.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		docs, err := Read(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Convert(docs[0]); err != nil {
			b.Fatal(err)
		}
	}
}
