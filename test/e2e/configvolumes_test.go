//go:build cluster && qemu

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/test/testguest"
)

// TestConfigVolumes: a VMI with configMap, secret, serviceAccount and
// downwardAPI disks on the real cluster. The kubelet mounts each source
// into the launcher Pod, the launcher makes ISO images of them, and the
// guest reads every file by its Kubernetes name: the ConfigMap's and the
// Secret's keys, a ServiceAccount token for its namespace, the VMI's labels.
func TestConfigVolumes(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "cfgvols"
	t.Cleanup(func() {
		ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m")                               //nolint:errcheck // best effort
		ev.c.Kubectl("-n", ns, "delete", "configmap,secret,serviceaccount", "-l", "kemu-e2e="+name, "--ignore-not-found") //nolint:errcheck // best effort
	})
	ev.apply(t, fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: %[1]s-app, namespace: %[2]s, labels: {kemu-e2e: %[1]s}}
data:
  App.Properties: "color=blue\n"
---
apiVersion: v1
kind: Secret
metadata: {name: %[1]s-creds, namespace: %[2]s, labels: {kemu-e2e: %[1]s}}
stringData:
  password: s3cret
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: %[1]s-sa, namespace: %[2]s, labels: {kemu-e2e: %[1]s}}
---
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: %[1]s, namespace: %[2]s, labels: {kemu-e2e: %[1]s, tier: web}}
spec:
  domain:
    memory: {guest: 128Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.dhcp=0
        container: {image: %[3]s, imagePullPolicy: IfNotPresent, kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: app, disk: {bus: virtio}}
      - {name: creds, disk: {bus: virtio}}
      - {name: sa, disk: {bus: virtio}}
      - {name: info, disk: {bus: virtio}}
  volumes:
  - {name: app, configMap: {name: %[1]s-app, volumeLabel: APPCONFIG}}
  - {name: creds, secret: {secretName: %[1]s-creds, volumeLabel: CREDS}}
  - {name: sa, serviceAccount: {serviceAccountName: %[1]s-sa}}
  - name: info
    downwardAPI:
      volumeLabel: PODINFO
      fields:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
`, name, ns, kernelBootImage))
	ev.waitRunning(ctx, t, name, bootTimeout)
	con := ev.startConsole(t, name)
	if err := con.waitFor(ctx, "KEMU-GUEST ready", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	con.stop()
	labels := map[string]string{} // dev → volume label
	files := map[string]string{}  // "<label>/<path>" → content
	// "<label>/<path>" → the guest's own size and first line: a long
	// marker (a token's or a certificate's b64) can lose bytes on a loaded
	// serial console (hack/testguest/README.md); these come first on the line.
	sizes, firsts := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(con.out.String(), "\n") {
		m, ok := testguest.ParseMarker(line)
		switch {
		case !ok:
		case m.Kind == testguest.KindVolume:
			labels[m.Field("dev")] = m.Field("label")
		case m.Kind == testguest.KindVolFile:
			b, _ := base64.StdEncoding.DecodeString(m.Field("b64"))
			k := labels[m.Field("dev")] + "/" + m.Field("path")
			files[k], sizes[k], firsts[k] = string(b), m.Field("size"), m.Field("first")
		}
	}
	for file, want := range map[string]string{
		"APPCONFIG/App.Properties": "color=blue\n",
		"CREDS/password":           "s3cret",
		"cfgdata/namespace":        ns,
	} {
		if files[file] != want {
			t.Errorf("%s = %q, want %q (the guest saw %v)", file, files[file], want, slices.Sorted(maps.Keys(files)))
		}
	}
	if size, _ := strconv.Atoi(sizes["cfgdata/token"]); size < 100 || !strings.HasPrefix(firsts["cfgdata/token"], "eyJ") {
		t.Errorf("serviceAccount token: %d bytes starting %q, want a JWT", size, firsts["cfgdata/token"])
	}
	if firsts["cfgdata/ca.crt"] != "-----BEGIN CERTIFICATE-----" {
		t.Errorf("ca.crt starts %q", firsts["cfgdata/ca.crt"])
	}
	if l := files["PODINFO/labels"]; !strings.Contains(l, `tier="web"`) {
		t.Errorf("downward API labels %q, want the VMI's tier=\"web\"", l)
	}
	ev.deleteVMI(ctx, t, name)
}
