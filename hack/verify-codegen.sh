#!/usr/bin/env bash
# Fails when a generated file differs from what hack/update-codegen.sh makes:
# regenerates in place and compares every file's hash before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
snapshot() { find api deploy/base/crd deploy/instancetypes launcher/rpc devices/kvm/guest nodeagent/seccomp -type f -print0 | sort -z | xargs -0 sha256sum; }
before=$(snapshot)
bash hack/update-codegen.sh
after=$(snapshot)
if [ "$before" != "$after" ]; then
	echo "generated files were stale; 'make generate' changed:" >&2
	diff <(echo "$before") <(echo "$after") >&2 || true
	exit 1
fi
echo "generated files are up to date"
