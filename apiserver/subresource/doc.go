// Package subresource serves kemu-api's aggregated API,
// subresources.kemu.dev/v1alpha1 (api/subresources is the contract). By
// the time a request arrives, kube-apiserver has authenticated the user
// and the generic server in apiserver/server has authorized the
// subresource verb by SubjectAccessReview; what a handler then does, it
// does with kemu-api's own ServiceAccount:
//
//   - pause, unpause, softreboot: the VMI's kemu.dev/paused and
//     kemu.dev/soft-reboot annotations, which the node agent on the VMI's
//     node carries out (the admission webhook lets only kemu's service
//     accounts change them);
//   - start, stop, restart: the VM's runStrategy or state change requests
//     in its status, as KubeVirt's virt-api;
//   - migrate: a VirtualMachineInstanceMigration;
//   - console, vnc: a WebSocket (api/subresources.StreamProtocol) spliced
//     to the node agent of the VMI's node over mutual TLS (kube/nodeapi),
//     which splices it to the launcher; nothing on the way runs a shell;
//   - guestosinfo, userlist, filesystemlist: the node agent's answer;
//   - stats: the node agent's figures of the VMI (the launcher's
//     GetStats at the time of the request).
package subresource
