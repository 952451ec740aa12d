//go:build qemu

package launcher

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/test/testguest"
)

// kubeletMount writes keys as the kubelet's atomic writer lays out a
// configMap, secret or downwardAPI volume: the data in a timestamped
// directory behind "..data", one symlink per key.
func kubeletMount(t *testing.T, dir string, keys map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "..2026_11_28_01_02_03.000000001")
	for k, v := range keys {
		p := filepath.Join(data, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	tops := map[string]bool{}
	for k := range keys {
		tops[strings.SplitN(k, "/", 2)[0]] = true
	}
	for top := range tops {
		if err := os.Symlink(filepath.Join("..data", top), filepath.Join(dir, top)); err != nil {
			t.Fatal(err)
		}
	}
}

// Every config volume reaches the guest as an ISO disk with its label and
// its files under their Kubernetes names (Rock Ridge), on virtio, SCSI and
// as a SATA CD-ROM; cloudInitConfigDrive is found by the guest as an
// OpenStack config drive.
func TestConfigVolumesInGuest(t *testing.T) {
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: cfg}
spec:
  domain:
    memory: {guest: 192Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.dhcp=0 kemu.agent=0
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: app, serial: app, disk: {bus: virtio}}
      - {name: creds, serial: creds, disk: {bus: scsi}}
      - {name: sa, serial: sa}
      - {name: info, serial: info}
      - {name: answers, cdrom: {bus: sata}}
      - {name: drive, serial: drive}
  volumes:
  - {name: app, configMap: {name: app-config, volumeLabel: APPCONFIG}}
  - {name: creds, secret: {secretName: db-creds}}
  - {name: sa, serviceAccount: {serviceAccountName: builder}}
  - name: info
    downwardAPI:
      volumeLabel: podinfo
      fields:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
  - {name: answers, sysprep: {configMap: {name: unattend}}}
  - name: drive
    cloudInitConfigDrive:
      userData: |
        #cloud-config
        kemu-test: configdrive
`)
	cfg := newConfig(t, vmi)
	cfg.ConfigDir = filepath.Join(shortDir(t), "config")
	mounts := map[string]map[string]string{
		"app":     {"App.Properties": "color=blue\n", "nested/settings.yaml": "a: 1\n"},
		"creds":   {"password": "s3cret"},
		"sa":      {"token": "eyJhbGciOi.test", "ca.crt": "-----BEGIN CERTIFICATE-----\n", "namespace": "test"},
		"info":    {"labels": "app=\"web\"\n"},
		"answers": {"Autounattend.xml": "<unattend/>\n"},
	}
	for vol, keys := range mounts {
		kubeletMount(t, filepath.Join(cfg.ConfigDir, vol), keys)
	}
	v := start(t, cfg)
	wantLabels := map[string]string{"app": "APPCONFIG", "creds": "cfgdata", "sa": "cfgdata", "info": "podinfo", "answers": "unattendCD"}
	for vol, keys := range mounts {
		// Each disk carries its volume's name as serial, the CD-ROM has
		// none: find the volume by its label and a file only it has.
		var first string
		for k := range keys {
			first = k
			break
		}
		m := v.wait(bootTimeout, func(m testguest.Marker) bool {
			return m.Kind == testguest.KindVolume && m.Field("label") == wantLabels[vol] && strings.Contains(","+m.Field("files")+",", ","+first+",")
		})
		if m.Field("status") != "found" || m.Field("fs") != "iso9660" {
			t.Errorf("%s: %s", vol, m.Raw)
		}
		for k, want := range keys {
			f := v.wait(bootTimeout, testguest.IsKind(testguest.KindVolFile, "dev", m.Field("dev"), "path", k))
			if got, _ := base64.StdEncoding.DecodeString(f.Field("b64")); string(got) != want {
				t.Errorf("%s: %s = %q, want %q", vol, k, got, want)
			}
		}
	}
	ci := v.wait(bootTimeout, testguest.IsKind(testguest.KindCIData))
	if ci.Field("status") != "found" || ci.Field("source") != "configdrive" {
		t.Errorf("cidata: %s", ci.Raw)
	}
	ud := v.wait(bootTimeout, testguest.IsKind(testguest.KindUserData))
	if ud.Field("first") != "#cloud-config" {
		t.Errorf("userdata: %s", ud.Raw)
	}
	md := v.wait(bootTimeout, testguest.IsKind(testguest.KindMetaData))
	if md.Field("local-hostname") != "cfg" {
		t.Errorf("metadata: %s", md.Raw)
	}
	v.wait(bootTimeout, testguest.IsKind(testguest.KindReady))
}
