package cloudinit

import (
	"encoding/base64"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kdomanski/iso9660"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/v1alpha1"
)

// readISO returns the label and the root files of an ISO image.
func readISO(t *testing.T, path string) (string, map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := iso9660.OpenImage(f)
	if err != nil {
		t.Fatal(err)
	}
	label, err := img.Label()
	if err != nil {
		t.Fatal(err)
	}
	root, err := img.RootDir()
	if err != nil {
		t.Fatal(err)
	}
	children, err := root.GetChildren()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, c := range children {
		if c.IsDir() {
			t.Errorf("unexpected directory %s", c.Name())
			continue
		}
		b, err := io.ReadAll(c.Reader())
		if err != nil {
			t.Fatal(err)
		}
		files[c.Name()] = string(b)
	}
	return label, files
}

func TestNoCloudISO(t *testing.T) {
	dir := t.TempDir()
	ud := "#cloud-config\nhostname: x\nruncmd:\n  - echo \"hello, kemu\"\n" + strings.Repeat("# padding to cross a sector\n", 100)
	nd := "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n"
	for _, tc := range []struct {
		name string
		d    Data
		want map[string]string
	}{
		{"all", Data{UserData: []byte(ud), MetaData: MetaData("iid-1", "vm1"), NetworkData: []byte(nd)},
			map[string]string{"user-data": ud, "meta-data": "instance-id: iid-1\nlocal-hostname: vm1\n", "network-config": nd}},
		{"no network", Data{UserData: []byte(ud), MetaData: MetaData("ns.vm", "vm")},
			map[string]string{"user-data": ud, "meta-data": "instance-id: ns.vm\nlocal-hostname: vm\n"}},
		{"empty user-data", Data{MetaData: MetaData("i", "h"), NetworkData: []byte(nd)},
			map[string]string{"user-data": "", "meta-data": "instance-id: i\nlocal-hostname: h\n", "network-config": nd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".iso")
			if err := NoCloudISO(p, tc.d); err != nil {
				t.Fatal(err)
			}
			label, files := readISO(t, p)
			if label != VolumeLabel {
				t.Errorf("label %q, want %q", label, VolumeLabel)
			}
			if len(files) != len(tc.want) {
				t.Errorf("files %v, want %v", keys(files), keys(tc.want))
			}
			for name, want := range tc.want {
				if got, ok := files[name]; !ok || got != want {
					t.Errorf("%s: %q (present %v), want %q", name, got, ok, want)
				}
			}
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o644 || st.Size()%2048 != 0 {
				t.Errorf("mode %v size %d", st.Mode(), st.Size())
			}
			// blkid (util-linux) is what finds the seed in real guests.
			if blkid, err := exec.LookPath("blkid"); err == nil {
				out, err := exec.Command(blkid, "-p", "-o", "export", p).Output()
				if err != nil {
					t.Fatalf("blkid: %v", err)
				}
				if !strings.Contains(string(out), "LABEL=cidata") || !strings.Contains(string(out), "TYPE=iso9660") {
					t.Errorf("blkid: %s", out)
				}
			}
		})
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestNoCloudISOErrors(t *testing.T) {
	dir := t.TempDir()
	if err := NoCloudISO(filepath.Join(dir, "x.iso"), Data{UserData: []byte("x")}); err == nil {
		t.Error("no meta-data: no error")
	}
	if err := NoCloudISO(filepath.Join(dir, "missing", "x.iso"), Data{MetaData: MetaData("i", "h")}); err == nil {
		t.Error("missing directory: no error")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

func keys(m map[string]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

func TestMetaData(t *testing.T) {
	for _, tc := range []struct{ iid, host, want string }{
		{"6a1f3c2e-1b2d-4e5f-8a9b-0c1d2e3f4a5b", "vm1", "instance-id: 6a1f3c2e-1b2d-4e5f-8a9b-0c1d2e3f4a5b\nlocal-hostname: vm1\n"},
		{"default.vm1", "vm1", "instance-id: default.vm1\nlocal-hostname: vm1\n"},
		{"a: b", "yes", "instance-id: \"a: b\"\nlocal-hostname: \"yes\"\n"},
		{"12", "", "instance-id: \"12\"\n"},
	} {
		got := string(MetaData(tc.iid, tc.host))
		if got != tc.want {
			t.Errorf("MetaData(%q, %q) = %q, want %q", tc.iid, tc.host, got, tc.want)
		}
		var m map[string]string
		if err := yaml.Unmarshal([]byte(got), &m); err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		if m["instance-id"] != tc.iid || m["local-hostname"] != tc.host {
			t.Errorf("%q parses as %v", got, m)
		}
	}
}

func TestResolve(t *testing.T) {
	secrets := t.TempDir()
	write := func(secret, key, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(secrets, secret), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(secrets, secret, key), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("lower", "userdata", "#cloud-config\nfrom: lower\n")
	write("lower", "networkdata", "version: 2\n")
	write("camel", "userData", "#cloud-config\nfrom: camel\n")
	write("camel", "networkData", "version: 1\n")
	write("both", "userdata", "lower wins")
	write("both", "userData", "camel loses")
	write("nokey", "other", "x")
	write("onlyuser", "userdata", "u")
	if err := os.WriteFile(filepath.Join(secrets, "afile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A mounted Secret volume: keys are symlinks into ..data/.
	write("mounted/..data", "userdata", "via symlink")
	if err := os.Symlink("..data/userdata", filepath.Join(secrets, "mounted", "userdata")); err != nil {
		t.Fatal(err)
	}
	ref := func(n string) *corev1.LocalObjectReference { return &corev1.LocalObjectReference{Name: n} }
	b64 := base64.StdEncoding.EncodeToString

	for _, tc := range []struct {
		name     string
		src      *v1alpha1.CloudInitNoCloudSource
		ud, nd   string
		noNet    bool
		errField string // FieldError.Field
		errText  string
	}{
		{name: "userData", src: &v1alpha1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}, ud: "#cloud-config\n", noNet: true},
		{name: "userData+networkData", src: &v1alpha1.CloudInitNoCloudSource{UserData: "u", NetworkData: "n"}, ud: "u", nd: "n"},
		{name: "userDataBase64", src: &v1alpha1.CloudInitNoCloudSource{UserDataBase64: b64([]byte("#cloud-config\nx: ü\n")), NetworkDataBase64: b64([]byte("net"))},
			ud: "#cloud-config\nx: ü\n", nd: "net"},
		{name: "base64 unpadded and wrapped", src: &v1alpha1.CloudInitNoCloudSource{UserDataBase64: "aGVs\nbG8"}, ud: "hello", noNet: true},
		{name: "networkData only", src: &v1alpha1.CloudInitNoCloudSource{NetworkData: "n"}, ud: "", nd: "n"},
		{name: "secret lower", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("lower")}, ud: "#cloud-config\nfrom: lower\n", nd: "version: 2\n"},
		{name: "secret camel", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("camel")}, ud: "#cloud-config\nfrom: camel\n", nd: "version: 1\n"},
		{name: "secret both", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("both")}, ud: "lower wins", noNet: true},
		{name: "secret + inline network", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("lower"), NetworkData: "inline"}, ud: "#cloud-config\nfrom: lower\n", nd: "inline"},
		{name: "secret mounted", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("mounted")}, ud: "via symlink", noNet: true},

		{name: "bad base64", src: &v1alpha1.CloudInitNoCloudSource{UserDataBase64: "!!!not base64"}, errField: "userDataBase64", errText: "cloudInitNoCloud.userDataBase64: invalid base64"},
		{name: "bad network base64", src: &v1alpha1.CloudInitNoCloudSource{UserData: "u", NetworkDataBase64: "%%%"}, errField: "networkDataBase64", errText: "invalid base64"},
		{name: "missing secret", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("nope")}, errField: "secretRef.name", errText: `secret "nope" not found`},
		{name: "secret without key", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("nokey")}, errField: "secretRef", errText: `secret "nokey" has no userdata or userData key`},
		{name: "secret is a file", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("afile")}, errField: "secretRef.name", errText: "is not a directory"},
		{name: "secret path traversal", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("../etc")}, errField: "secretRef.name", errText: "invalid secret name"},
		{name: "secret empty name", src: &v1alpha1.CloudInitNoCloudSource{SecretRef: ref("")}, errField: "secretRef.name", errText: "empty secret name"},
		{name: "nothing", src: &v1alpha1.CloudInitNoCloudSource{}, errField: "userData", errText: "is required"},
		{name: "two user data", src: &v1alpha1.CloudInitNoCloudSource{UserData: "a", UserDataBase64: "YQ=="}, errField: "userData", errText: "mutually exclusive"},
		{name: "two network data", src: &v1alpha1.CloudInitNoCloudSource{UserData: "a", NetworkData: "n", NetworkDataBase64: "YQ=="}, errField: "networkData", errText: "mutually exclusive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Resolve(tc.src, secrets, "iid", "host")
			if tc.errText != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tc.errField || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("error %v, want field %s and %q", err, tc.errField, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(d.UserData) != tc.ud {
				t.Errorf("user data %q, want %q", d.UserData, tc.ud)
			}
			if string(d.NetworkData) != tc.nd || (tc.noNet && d.NetworkData != nil) {
				t.Errorf("network data %q, want %q", d.NetworkData, tc.nd)
			}
			if string(d.MetaData) != "instance-id: iid\nlocal-hostname: host\n" {
				t.Errorf("meta-data %q", d.MetaData)
			}
		})
	}
	if _, err := Resolve(&v1alpha1.CloudInitNoCloudSource{SecretRef: ref("lower")}, "", "i", "h"); err == nil ||
		!strings.Contains(err.Error(), "no secrets directory") {
		t.Errorf("no secrets dir: %v", err)
	}
	if _, err := Resolve(nil, secrets, "i", "h"); err == nil {
		t.Error("nil source: no error")
	}
}
