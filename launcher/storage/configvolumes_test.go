package storage

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/cloudinit"
	"github.com/kemu-dev/kemu/launcher/configdisk"
)

// configDir lays out <ConfigDir>/<volume>/<key> as the kubelet's mounts.
func configDir(t *testing.T, vols map[string]map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for vol, keys := range vols {
		for k, v := range keys {
			p := filepath.Join(root, vol, k)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func TestPrepareConfigVolumes(t *testing.T) {
	cfg := configDir(t, map[string]map[string]string{
		"cm":  {"App.Properties": "color=blue\n"},
		"sec": {"password": "s3cret"},
		"sa":  {"token": "ey...", "ca.crt": "PEM", "namespace": "ns"},
		"dn":  {"labels": `app="web"`},
		"win": {"Autounattend.xml": "<unattend/>"},
	})
	vmi := vmiWith(
		v1alpha1.Volume{Name: "cm", ConfigMap: &v1alpha1.ConfigMapVolumeSource{Name: "app", VolumeLabel: "APPCFG"}},
		v1alpha1.Volume{Name: "sec", Secret: &v1alpha1.SecretVolumeSource{SecretName: "s"}},
		v1alpha1.Volume{Name: "sa", ServiceAccount: &v1alpha1.ServiceAccountVolumeSource{ServiceAccountName: "default"}},
		v1alpha1.Volume{Name: "dn", DownwardAPI: &v1alpha1.DownwardAPIVolumeSource{Fields: []corev1.DownwardAPIVolumeFile{{Path: "labels"}}}},
		v1alpha1.Volume{Name: "win", Sysprep: &v1alpha1.SysprepSource{ConfigMap: &corev1.LocalObjectReference{Name: "u"}}},
		v1alpha1.Volume{Name: "cd", CloudInitConfigDrive: &v1alpha1.CloudInitConfigDriveSource{UserData: "#cloud-config\n", NetworkData: `{"links":[]}`}},
	)
	dir := t.TempDir()
	p, err := Prepare(context.Background(), vmi, Options{Dir: dir, ConfigDir: cfg})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		volume, kind, label, file, content string
	}{
		{"cm", KindConfigMap, "APPCFG", "App.Properties", "color=blue\n"},
		{"sec", KindSecret, configdisk.DefaultLabel, "password", "s3cret"},
		{"sa", KindServiceAccount, configdisk.DefaultLabel, "namespace", "ns"},
		{"dn", KindDownwardAPI, configdisk.DefaultLabel, "labels", `app="web"`},
		{"win", KindSysprep, configdisk.SysprepLabel, "Autounattend.xml", "<unattend/>"},
		{"cd", KindCloudInitConfigDrive, cloudinit.ConfigDriveLabel, cloudinit.ConfigDriveUserData, "#cloud-config\n"},
	} {
		v := p.Volumes[tc.volume]
		if v.Kind != tc.kind || !v.ReadOnly || v.Format != FormatRaw || filepath.Dir(v.Path) != dir {
			t.Errorf("%s: %+v", tc.volume, v)
			continue
		}
		label, files, err := configdisk.Read(v.Path)
		if err != nil || label != tc.label || string(files[tc.file]) != tc.content {
			t.Errorf("%s: label %q files %q, %v; want %q with %s=%q", tc.volume, label, files, err, tc.label, tc.file, tc.content)
		}
	}
	_, files, _ := configdisk.Read(p.Volumes["cd"].Path)
	var md map[string]string
	if err := json.Unmarshal(files[cloudinit.ConfigDriveMetaData], &md); err != nil || md["uuid"] != InstanceID(vmi) || md["hostname"] != v1alpha1.DeriveHostname(vmi.Name) {
		t.Errorf("meta_data.json %s, %v", files[cloudinit.ConfigDriveMetaData], err)
	}
	if string(files[cloudinit.ConfigDriveNetworkData]) != `{"links":[]}` {
		t.Errorf("network_data.json %q", files[cloudinit.ConfigDriveNetworkData])
	}
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if left := dirEntries(t, dir); len(left) != 0 {
		t.Errorf("left after Cleanup: %v", left)
	}
}

func TestPrepareConfigVolumeErrors(t *testing.T) {
	cfg := configDir(t, map[string]map[string]string{"win": {"readme.txt": "no answer file"}})
	cm := v1alpha1.Volume{Name: "cm", ConfigMap: &v1alpha1.ConfigMapVolumeSource{Name: "app"}}
	for _, tc := range []struct {
		name      string
		vol       v1alpha1.Volume
		configDir string
		field     string
		text      string
	}{
		{"kemuctl run: no cluster", cm, "", "spec.volumes[0].configMap", "needs a cluster"},
		{"not mounted", cm, cfg, "spec.volumes[0].configMap", "no mount of volume"},
		{"sysprep without an answer file", v1alpha1.Volume{Name: "win", Sysprep: &v1alpha1.SysprepSource{Secret: &corev1.LocalObjectReference{Name: "w"}}},
			cfg, "spec.volumes[0].sysprep", "neither autounattend.xml nor unattend.xml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Prepare(context.Background(), vmiWith(tc.vol), Options{Dir: dir, ConfigDir: tc.configDir})
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error %v, want %s: …%s…", err, tc.field, tc.text)
			}
			if left := dirEntries(t, dir); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}
