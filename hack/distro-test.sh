#!/usr/bin/env bash
# Runs kemu's QEMU-level suites against Debian 13's QEMU (10.x): the test
# binaries are compiled on the host (go test -c -race -tags qemu; Go is not
# installed in the root) and each runs inside _out/distro/debian13
# (hack/distro-root.sh), in a private mount namespace, with the repository at
# its own absolute path and cwd = the package directory, as go test does.
#
#   hack/distro-test.sh                 every package below
#   hack/distro-test.sh qmp launcher    only these (same -run subsets)
#
# The tests that build a helper binary (go build kemuctl, kemu-launcher) use
# the host's Go toolchain, module and build caches, bound read-only/at their
# own paths into the root; without a C compiler there those builds are
# CGO_ENABLED=0 (static), which is what kemu's release binaries are anyway.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=_out/distro/debian13
BINS=_out/distro/tests
# The QEMU major version the root must have: a mirror change must not
# silently test another QEMU (docs/ci.md lists the versions tested).
WANT_QEMU_MAJOR=10

# Packages, in order, and the -run subset of each ("" = all its tests).
# launcher: the whole package is ~6 min of TCG boots; the subset (~2 min)
# covers boot (disk, kernel, EFI), disks, pause, the guest agent, shutdown,
# the pod network, QEMU's crash and kill, and migration (incoming argv,
# precopy, postcopy, cancel); docs/decisions.md says why these.
PACKAGES=(qmp launcher/cmdline launcher/storage launcher/cmdserver cmd/kemu-launcher cmd/kemuctl test/testguest devices/kvm launcher)
declare -A RUN=(
	[launcher]='^(TestDiskBootDevicesPauseAgentShutdown|TestKernelBootWithProbe|TestEFIBoot|TestGuestExecAndCopyBounds|TestPodNetworkMasquerade|TestQEMUCrashIsReported|TestBadInputLeavesNothing|TestKilledLauncherTakesQEMU|TestStartIncoming|TestMigrationIdleGuest|TestMigrationPostCopyLauncherTarget|TestMigrationCancel)$'
)

log() { printf '[distro-test] %s\n' "$*"; }

# inside PKG BIN RUN: runs in the private mount namespace (unshare -m).
inside() {
	local pkg=$1 bin=$2 run=$3 repo out goroot gomod gocache
	repo=$(pwd -P)
	out=$(readlink -f _out)
	goroot=$(go env GOROOT)
	gomod=$(go env GOMODCACHE)
	gocache=$(go env GOCACHE)
	local root="$repo/$ROOT"
	root=$(readlink -f "$root")
	mount -t proc proc "$root/proc"
	mount --rbind /sys "$root/sys" # with /sys/fs/cgroup
	mount --rbind /dev "$root/dev" # with /dev/pts, /dev/shm, /dev/net/tun, /dev/kvm
	mount --bind /tmp "$root/tmp"
	mount --rbind /run "$root/run"
	local d
	for d in "$repo" "$out" "$goroot" "$gomod" "$gocache"; do
		mkdir -p "$root$d"
		mount --bind "$d" "$root$d"
	done
	mount -o remount,bind,ro "$root$goroot"
	local args=(-test.v -test.count=1 -test.timeout=30m)
	[ -z "$run" ] || args+=("-test.run=$run")
	# shellcheck disable=SC2016 # $1 and $@ are the inner shell's
	exec chroot "$root" /usr/bin/env -i \
		PATH="$goroot/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		HOME=/root TMPDIR=/tmp GOCACHE="$gocache" GOMODCACHE="$gomod" GOFLAGS=-buildvcs=false \
		GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 \
		/bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$repo/$pkg" "$repo/$bin" "${args[@]}"
}

if [ "${1:-}" = --inside ]; then
	shift
	inside "$@"
fi

bash hack/distro-root.sh
ver=$(chroot "$ROOT" qemu-system-x86_64 --version | head -1)
log "QEMU in $ROOT: $ver"
if ! [[ $ver =~ version\ ${WANT_QEMU_MAJOR}\. ]]; then
	log "expected QEMU ${WANT_QEMU_MAJOR}.x in the Debian 13 root, got: $ver"
	exit 1
fi

pkgs=("$@")
((${#pkgs[@]})) || pkgs=("${PACKAGES[@]}")
mkdir -p "$BINS"
failed=()
for pkg in "${pkgs[@]}"; do
	bin="$BINS/${pkg//\//_}.test"
	start=$SECONDS
	go test -c -race -tags qemu -o "$bin" "./$pkg"
	built=$((SECONDS - start))
	run=${RUN[$pkg]:-}
	log "$pkg: built in ${built} s; running in $ROOT${run:+ (-run $run)}"
	start=$SECONDS
	if unshare -m --propagation private -- bash "$0" --inside "$pkg" "$bin" "$run"; then
		log "ok   $pkg $((SECONDS - start)) s (QEMU: $ver)"
	else
		log "FAIL $pkg $((SECONDS - start)) s (QEMU: $ver)"
		failed+=("$pkg")
	fi
done
if ((${#failed[@]})); then
	log "failed against $ver: ${failed[*]}"
	exit 1
fi
log "all ${#pkgs[@]} packages passed against $ver"
