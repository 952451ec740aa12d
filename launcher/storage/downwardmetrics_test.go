package storage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/downwardmetrics"
)

// TestPrepareDownwardMetrics: every downwardMetrics volume is the one
// vhostmd disk <Dir>/vhostmd0, raw, read-only, 256 KiB, holding an empty
// metrics document; Cleanup removes it.
func TestPrepareDownwardMetrics(t *testing.T) {
	dir := t.TempDir()
	vmi := vmiWith(
		v1alpha1.Volume{Name: "m1", DownwardMetrics: &v1alpha1.DownwardMetricsVolumeSource{}},
		v1alpha1.Volume{Name: "m2", DownwardMetrics: &v1alpha1.DownwardMetricsVolumeSource{}})
	p, err := Prepare(ctxT(t), vmi, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, DownwardMetricsDisk)
	for _, name := range []string{"m1", "m2"} {
		v := p.Volumes[name]
		if v.Kind != KindDownwardMetrics || v.Path != want || v.Format != FormatRaw || !v.ReadOnly || v.Size != downwardmetrics.DiskSize || v.Block {
			t.Errorf("volume %s: %+v", name, v)
		}
	}
	f, err := os.Open(want)
	if err != nil {
		t.Fatal(err)
	}
	m, err := downwardmetrics.Read(f)
	f.Close()
	if err != nil || len(m.Metrics) != 0 {
		t.Errorf("new disk: %+v, %v", m, err)
	}
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if left := dirEntries(t, dir); len(left) != 0 {
		t.Errorf("left after Cleanup: %v", left)
	}
}
