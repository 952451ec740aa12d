package admission

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A bad VMI is refused as kube-apiserver refuses an invalid object: 422
// Invalid, one cause per error with its field path, all in the message.
func TestValidateVMICreate(t *testing.T) {
	bad := `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: vm, namespace: ns}
spec:
  domain:
    memory: {guest: 16Mi}
    devices:
      disks:
      - {name: root, bootOrder: 0}
      - {name: orphan}
      interfaces:
      - {name: nic}
  volumes:
  - {name: root, containerDisk: {image: example/os:1}}
`
	tests := []struct {
		name, obj string
		want      []string // sorted causes
	}{
		{name: "valid", obj: goodVMI},
		{name: "every error", obj: bad, want: []string{
			"spec.domain.devices.disks[0].bootOrder: FieldValueInvalid",
			"spec.domain.devices.disks[1].name: FieldValueInvalid",
			"spec.domain.devices.interfaces[0].name: FieldValueInvalid",
			"spec.domain.memory.guest: FieldValueInvalid",
		}},
		{name: "unsupported field", obj: strings.Replace(goodVMI, "spec:\n", "spec:\n  architecture: arm64\n", 1),
			want: []string{"spec.architecture: FieldValueForbidden"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, PathValidateVMI, request(t, vmiKind, admissionv1.Create, "alice", tt.obj, ""))
			if len(tt.want) == 0 {
				if !resp.Allowed {
					t.Fatalf("refused: %+v", resp.Result)
				}
				return
			}
			if resp.Allowed {
				t.Fatal("allowed")
			}
			r := resp.Result
			if r.Code != http.StatusUnprocessableEntity || r.Reason != metav1.StatusReasonInvalid ||
				r.Details == nil || r.Details.Kind != "VirtualMachineInstance" || r.Details.Group != "kemu.dev" || r.Details.Name != "vm" {
				t.Errorf("status %+v", r)
			}
			got := causes(resp)
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("causes\n got  %q\n want %q", got, tt.want)
			}
			for _, c := range r.Details.Causes {
				if !strings.Contains(r.Message, c.Field) {
					t.Errorf("message %q does not name %s", r.Message, c.Field)
				}
			}
		})
	}
}

// The hostDisk policy applies when kemu-api is given it.
func TestValidateVMIHostDisks(t *testing.T) {
	obj := strings.Replace(goodVMI, "    containerDisk:\n      image: example/os:1\n",
		"    hostDisk: {path: /etc/shadow, type: Disk}\n", 1)
	req := request(t, vmiKind, admissionv1.Create, "alice", obj, "")
	if resp := Handlers(Config{})[PathValidateVMI].(*webhook).admit(req); !resp.Allowed {
		t.Errorf("without a policy: refused %+v", resp.Result)
	}
	cfg := Config{HostDiskDirs: func() []string { return []string{"/var/lib/disks"} }}
	resp := Handlers(cfg)[PathValidateVMI].(*webhook).admit(req)
	if resp.Allowed || !slices.Equal(causes(resp), []string{"spec.volumes[0].hostDisk.path: FieldValueForbidden"}) {
		t.Errorf("with a policy: %+v", resp.Result)
	}
}

// A local image reference (kemuctl run's oci: layouts and archives) is
// refused in a VMI and in a VM's template, naming the field: a cluster
// pulls images from a registry, so such a VMI would never start.
func TestValidateLocalImages(t *testing.T) {
	vmi := func(image string) string { return strings.Replace(goodVMI, "image: example/os:1", "image: "+image, 1) }
	vm := func(image string) string { return strings.Replace(goodVM, "image: example/os:1", "image: "+image, 1) }
	tests := []struct {
		name, path, obj string
		kind            metav1.GroupVersionKind
		want            []string
	}{
		{"VMI registry image", PathValidateVMI, vmi("quay.io/containerdisks/cirros:6.2"), vmiKind, nil},
		{"VMI oci:", PathValidateVMI, vmi("oci:_out/testguest/oci/containerdisk"), vmiKind,
			[]string{"spec.volumes[0].containerDisk.image: FieldValueForbidden"}},
		{"VMI docker-archive:", PathValidateVMI, vmi("docker-archive:/tmp/os.tar"), vmiKind,
			[]string{"spec.volumes[0].containerDisk.image: FieldValueForbidden"}},
		{"VM oci:", PathValidateVM, vm("oci:_out/testguest/oci/containerdisk"), vmKind,
			[]string{"spec.template.spec.volumes[0].containerDisk.image: FieldValueForbidden"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, tt.path, request(t, tt.kind, admissionv1.Create, "alice", tt.obj, ""))
			if tt.want == nil {
				if !resp.Allowed {
					t.Fatalf("refused: %+v", resp.Result)
				}
				return
			}
			if resp.Allowed || !slices.Equal(causes(resp), tt.want) {
				t.Fatalf("got %+v, want %q", resp.Result, tt.want)
			}
			if !strings.Contains(resp.Result.Message, "references are for kemuctl run only; a cluster pulls images from a registry") {
				t.Errorf("message %q does not say why", resp.Result.Message)
			}
		})
	}
}

// A VMI's spec never changes; the request annotations change only by
// kemu's service accounts; everything else in metadata is free (adoption,
// finalizers, labels).
func TestValidateVMIUpdate(t *testing.T) {
	withIface := func(state string) string {
		st := ""
		if state != "" {
			st = ", state: " + state
		}
		s := strings.Replace(goodVMI, "    devices:\n", "    devices:\n      interfaces: [{name: default, passtBinding: {}"+st+"}]\n", 1)
		return strings.Replace(s, "  volumes:\n", "  networks: [{name: default, pod: {}}]\n  volumes:\n", 1)
	}
	annotated := func(kv ...string) string {
		s := "  annotations:\n"
		for i := 0; i < len(kv); i += 2 {
			s += "    " + kv[i] + ": \"" + kv[i+1] + "\"\n"
		}
		return strings.Replace(goodVMI, "  namespace: ns\n", "  namespace: ns\n"+s, 1)
	}
	tests := []struct {
		name, user, old, new string
		want                 []string
	}{
		{name: "nothing changed", user: "alice", old: goodVMI, new: goodVMI},
		{name: "labels, finalizers, owners", user: "alice", old: goodVMI,
			new: strings.Replace(goodVMI, "  namespace: ns\n", "  namespace: ns\n  labels: {a: b}\n  finalizers: [kemu.dev/x]\n  ownerReferences: [{apiVersion: kemu.dev/v1alpha1, kind: VirtualMachine, name: vm, uid: u1, controller: true}]\n", 1)},
		{name: "spec by a user", user: "alice", old: goodVMI, new: strings.Replace(goodVMI, "128Mi", "256Mi", 1),
			want: []string{"spec: FieldValueForbidden"}},
		{name: "spec by kemu", user: kemuController, old: goodVMI, new: strings.Replace(goodVMI, "128Mi", "256Mi", 1),
			want: []string{"spec: FieldValueForbidden"}},
		// interfaces[].state is the one live spec change (KubeVirt's link state).
		{name: "link down by a user", user: "alice", old: withIface(""), new: withIface("down")},
		{name: "link up by a user", user: "alice", old: withIface("down"), new: withIface("up")},
		{name: "link absent", user: "alice", old: withIface(""), new: withIface("absent"),
			want: []string{"spec: FieldValueForbidden"}},
		{name: "link and memory", user: "alice", old: withIface(""), new: strings.Replace(withIface("down"), "128Mi", "256Mi", 1),
			want: []string{"spec: FieldValueForbidden"}},
		{name: "pause by a user", user: "alice", old: goodVMI, new: annotated("kemu.dev/paused", "true"),
			want: []string{"metadata.annotations[kemu.dev/paused]: FieldValueForbidden"}},
		{name: "service account of another namespace", user: "system:serviceaccount:tenant:kemu-controller", old: goodVMI,
			new: annotated("kemu.dev/paused", "true"), want: []string{"metadata.annotations[kemu.dev/paused]: FieldValueForbidden"}},
		{name: "unpause by a user", user: "alice", old: annotated("kemu.dev/paused", "true"), new: goodVMI,
			want: []string{"metadata.annotations[kemu.dev/paused]: FieldValueForbidden"}},
		{name: "soft reboot and done by a user", user: "alice", old: annotated("kemu.dev/soft-reboot", "1", "kemu.dev/soft-reboot-done", "1"),
			new:  annotated("kemu.dev/soft-reboot", "2", "kemu.dev/soft-reboot-done", "2"),
			want: []string{"metadata.annotations[kemu.dev/soft-reboot-done]: FieldValueForbidden", "metadata.annotations[kemu.dev/soft-reboot]: FieldValueForbidden"}},
		{name: "other annotations by a user", user: "alice", old: annotated("kemu.dev/paused", "true"),
			new: annotated("kemu.dev/paused", "true", "note", "x")},
		{name: "pause by kemu-api", user: "system:serviceaccount:kemu-system:kemu-api", old: goodVMI, new: annotated("kemu.dev/paused", "true")},
		{name: "soft reboot done by the node agent", user: "system:serviceaccount:kemu-system:kemu-nodeagent",
			old: annotated("kemu.dev/soft-reboot", "1"), new: annotated("kemu.dev/soft-reboot", "1", "kemu.dev/soft-reboot-done", "1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, PathValidateVMI, request(t, vmiKind, admissionv1.Update, tt.user, tt.new, tt.old))
			got := causes(resp)
			slices.Sort(got)
			if resp.Allowed != (len(tt.want) == 0) || !slices.Equal(got, tt.want) {
				t.Errorf("allowed %v, causes %q, want %q (%+v)", resp.Allowed, got, tt.want, resp.Result)
			}
		})
	}
}

// The service accounts are configurable.
func TestPrivilegedConfig(t *testing.T) {
	cfg := Config{Namespace: "kemu", ServiceAccounts: []string{"api"}}.withDefaults()
	for user, want := range map[string]bool{
		"system:serviceaccount:kemu:api":             true,
		"system:serviceaccount:kemu-system:kemu-api": false,
		"system:serviceaccount:kemu:api2":            false,
		"system:serviceaccount:kemu:api:x":           false,
		"":                                           false,
	} {
		if got := cfg.privileged(user); got != want {
			t.Errorf("privileged(%q) = %v, want %v", user, got, want)
		}
	}
}
