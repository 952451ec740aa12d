// Package admissiontest holds the manifests the admission tests (the
// webhook's own on a real kube-apiserver, and the end-to-end suite's
// through kemu-api in the cluster) apply and the field paths each refusal
// must name.
package admissiontest

// BadVMIs are api/validation's bad cases as manifests, with the field paths
// kube-apiserver must name for each (the webhook's, or the CRD rule's where
// the schema refuses first).
var BadVMIs = []struct {
	Name, Spec string
	Paths      []string
}{
	{"disk without a volume", `
  domain:
    memory: {guest: 128Mi}
    devices:
      disks: [{name: root}, {name: orphan}]
  volumes: [{name: root, containerDisk: {image: example/os:1}}]`, []string{"spec.domain.devices.disks"}},
	{"memory below 32Mi and a bad boot order", `
  domain:
    memory: {guest: 16Mi}
    devices:
      disks: [{name: root, bootOrder: 0}]
  volumes: [{name: root, containerDisk: {image: example/os:1}}]`, []string{"spec.domain.memory.guest", "spec.domain.devices.disks[0].bootOrder"}},
	{"every webhook error", `
  domain:
    memory: {guest: 128Mi}
    machine: {type: pc-q35-1.0}
    cpu: {model: help}
    devices:
      disks: [{name: root, cdrom: {bus: virtio}}, {name: two, bootOrder: 1}, {name: three, bootOrder: 1}]
  volumes:
  - {name: root, containerDisk: {image: example/os:1}}
  - {name: two, emptyDisk: {capacity: 1Gi}}
  - {name: three, cloudInitNoCloud: {userDataBase64: "!!"}}`, []string{
		"spec.domain.machine.type", "spec.domain.cpu.model", "spec.domain.devices.disks[0].cdrom.bus",
		"spec.domain.devices.disks[2].bootOrder", "spec.volumes[2].cloudInitNoCloud.userDataBase64"}},
}
