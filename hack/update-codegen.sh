#!/usr/bin/env bash
# Regenerates every generated file: deepcopy, CRDs, clientset, listers, informers,
# the launcher API, the KVM probe guests.
# Running it twice changes nothing. Tools come from hack/install-deps.sh (pinned).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$root/_out/tools/bin
module=github.com/kemu-dev/kemu
header=$root/hack/boilerplate.go.txt

"$bin/controller-gen" object:headerFile="$header" paths=./api/...
rm -rf deploy/base/crd
"$bin/controller-gen" crd:generateEmbeddedObjectMeta=true paths=./api/... output:crd:artifacts:config=deploy/base/crd

# One clientset, listers and informers for every group: kemu.dev/v1alpha1 and
# instancetype.kemu.dev/v1beta1.
out=api/client
groups=("$module/api/v1alpha1" "$module/api/instancetype/v1beta1")
rm -rf "$out/clientset" "$out/listers" "$out/informers"
inputs=()
for g in "${groups[@]}"; do inputs+=(--input "$g"); done
"$bin/client-gen" --go-header-file "$header" --clientset-name versioned \
	--input-base "" "${inputs[@]}" \
	--output-dir "$out/clientset" --output-pkg "$module/$out/clientset"
"$bin/lister-gen" --go-header-file "$header" \
	--output-dir "$out/listers" --output-pkg "$module/$out/listers" "${groups[@]}"
"$bin/informer-gen" --go-header-file "$header" \
	--versioned-clientset-package "$module/$out/clientset/versioned" \
	--listers-package "$module/$out/listers" \
	--output-dir "$out/informers" --output-pkg "$module/$out/informers" "${groups[@]}"
gofmt -w api

# The optional overlay of common instance types and preferences.
go run ./hack/instancetypes deploy/instancetypes

# The launcher's command server API (protobuf + gRPC).
PATH="$bin:$PATH" protoc --proto_path=launcher/rpc \
	--go_out=launcher/rpc --go_opt=paths=source_relative \
	--go-grpc_out=launcher/rpc --go-grpc_opt=paths=source_relative \
	launcher/rpc/launcher.proto

# The seccomp profile of launcher Pods with passt (nodeagent/seccomp):
# containerd's default for every launcher capability, plus pivot_root, made
# in hack/containerd's module (containerd stays out of kemu's).
caps=$(go run ./hack/launchercaps)
(cd hack/containerd && go run ./seccompgen -o "$root/nodeagent/seccomp/zz_generated.profile.go" $caps)

# The KVM probe's guests (a boot sector and a static /init), embedded by devices/kvm.
bash devices/kvm/guest/build.sh
