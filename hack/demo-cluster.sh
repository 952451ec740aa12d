#!/usr/bin/env bash
# make demo-cluster: kemu on Kubernetes on this machine, from nothing and back
# to nothing, step by step with timings (make builds kemu, its images, the
# test guest and the Kubernetes binaries first):
#   1. hack/cluster.sh up --nodes 2: the throw-away cluster (etcd,
#      kube-apiserver, controller-manager, scheduler, two nodes with
#      containerd and a kubelet, each in its own namespaces);
#   2. kemu's four images and the test guest's containerDisk imported into
#      each node's containerd (no registry);
#   3. kubectl apply -k deploy/overlays/throwaway, then wait until kemu-api
#      serves and every node is labelled kemu.dev/schedulable=true;
#   4. kubectl apply -f examples/cluster/vm-testguest.yaml: Running, its IP,
#      a command on its serial console (kemuctl console), pause and unpause,
#      a live migration to the other node, delete;
#   5. uninstall (the order docs/deploy.md gives), hack/cluster.sh down, and
#      a check that no process, mount, network namespace or device, cgroup
#      or file of kemu's or the cluster's is left.
# Exit 0 only if every step worked and nothing is left.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
kemuctl=$root/_out/bin/kemuctl
state=$root/_out/cluster
overlay=deploy/overlays/throwaway
example=examples/cluster/vm-testguest.yaml
vm=testguest
vmns=default
kemuns=kemu-system
launchers=kemu.dev/app=launcher
images=(kemu-launcher kemu-controller kemu-api kemu-nodeagent)
containerdisk=_out/testguest/oci/containerdisk.docker.tar

if ((EUID != 0)); then
	echo "demo-cluster: needs root (the nodes' namespaces, cgroups, containerd and kubelets)" >&2
	exit 1
fi
need=("$kemuctl" "$containerdisk")
for i in "${images[@]}"; do need+=("_out/images/$i.oci.tar"); done
for f in "${need[@]}"; do
	[[ -e $f ]] || { echo "demo-cluster: $f is missing (make demo-cluster builds it)" >&2; exit 1; }
done
if bash hack/cluster.sh status >/dev/null 2>&1; then
	echo "demo-cluster: hack/cluster.sh's cluster already runs; this demo starts and stops its own (stop it: hack/cluster.sh down)" >&2
	exit 1
fi

t0=$SECONDS
step_name="" step_t0=$SECONDS
timings=()
step() {
	end_step
	step_name=$1 step_t0=$SECONDS
	printf '\n== [%4ds] %s\n' $((SECONDS - t0)) "$1"
}
end_step() {
	if [[ -n $step_name ]]; then
		timings+=("$(printf '    %4d s  %s' $((SECONDS - step_t0)) "$step_name")")
	fi
	step_name=""
}
say() { printf '   %s\n' "$*"; }

# wait_for TIMEOUT WHAT CMD...: runs CMD every second until it succeeds;
# fails naming WHAT and CMD's last output after TIMEOUT seconds.
wait_for() {
	local timeout=$1 what=$2 deadline out
	shift 2
	deadline=$((SECONDS + timeout))
	until out=$("$@" 2>&1); do
		if ((SECONDS >= deadline)); then
			echo "demo-cluster: $what: not within ${timeout} s; last: $out" >&2
			return 1
		fi
		sleep 1
	done
	[[ -z $out ]] || printf '%s\n' "$out"
}

# What kemu and the cluster may leave on the host, before they start and
# after they stopped. Only theirs: other work on this machine (make test runs
# the Debian 13 QEMU suites beside this demo) may start QEMUs, launchers,
# taps and network namespaces of its own meanwhile. hack/cluster.sh down
# checks the rest: no process of the cluster, no mount under its folder or
# the folder itself, no node bridge or veth, no node cgroup.
tracked=(/run/containerd /var/lib/cni /var/log/pods /var/log/containers /var/lib/kubelet /etc/cni /opt/cni /var/lib/containerd /var/lib/kemu /run/kemu /etc/kemu)
snapshot() {
	local d
	echo "processes in a node's cgroup: $(grep -l 'kemu-node-' /proc/[0-9]*/cgroup 2>/dev/null | wc -l)"
	echo "Pods' network namespaces: $(find /run/netns -maxdepth 1 -name 'cni-*' -printf '%f\n' 2>/dev/null | sort | tr '\n' ' ' || true)"
	echo "mounts of a kubelet, containerd or kemu: $(grep -cE 'kubelet|containerd|kemu' /proc/self/mountinfo || true)"
	echo "net.ipv4.ip_forward: $(cat /proc/sys/net/ipv4/ip_forward)"
	for d in "${tracked[@]}"; do
		echo "$d: $(find "$d" -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort | tr '\n' ' ' || true)"
	done
}
before=$(snapshot)

started=false
diagnostics() {
	[[ -n ${kubectl:-} && -f $state/kubeconfig ]] || return 0
	echo "----- diagnostics" >&2
	"$kubectl" get nodes -o wide >&2 || true
	"$kubectl" get pods -A -o wide >&2 || true
	"$kubectl" get vm,vmi,vmim -A -o wide >&2 || true
	"$kubectl" get events -A --sort-by=.lastTimestamp 2>/dev/null | tail -30 >&2 || true
	"$kubectl" -n "$kemuns" logs -l app.kubernetes.io/part-of=kemu --all-containers --prefix --tail=30 --max-log-requests=20 >&2 || true
}
cleanup() {
	local rc=$?
	if ((rc != 0)); then
		echo "demo-cluster: failed in step: ${step_name:-setup}" >&2
		diagnostics
	fi
	if $started; then
		bash hack/cluster.sh down >&2 || true
	fi
	exit "$rc"
}
trap cleanup EXIT

step "hack/cluster.sh up --nodes 2 (the throw-away cluster)"
# --no-crds: the CRDs come with kemu's kustomization, as on any cluster.
started=true
bash hack/cluster.sh up --nodes 2 --no-crds | sed 's/^/   /'
export KUBECONFIG=$state/kubeconfig
bin=$(sed -n 's/^BIN=//p' "$state/log")
kubectl=$bin/kubectl
mapfile -t nodes < <(sed -n 's/^NODE=//p' "$state/log")
"$kubectl" get nodes -o wide | sed 's/^/   /'

# ctr_import SOCKET ARCHIVE: ctr's output only when it fails (it warns
# about cgroup v1 on every call on a host that has it).
ctr_import() {
	local out
	out=$("$bin/ctr" --address "$1" --namespace k8s.io images import "$2" 2>&1) || {
		echo "$out" >&2
		return 1
	}
}
step "import kemu's images and the test guest's containerDisk into each node's containerd"
for n in "${nodes[@]}"; do
	name=${n%% *} sock=${n#* }
	for a in "${images[@]/#/_out/images/}"; do
		ctr_import "$sock" "$a.oci.tar"
	done
	ctr_import "$sock" "$containerdisk"
	say "$name: $("$bin/ctr" --address "$sock" --namespace k8s.io images ls -q | grep -c '^kemu.local/') kemu.local images"
done

step "kubectl apply -k $overlay"
"$kubectl" apply -k "$overlay" | sed 's/^/   /'

step "wait until kemu serves and every node accepts VMIs"
for r in deployment/kemu-controller deployment/kemu-api daemonset/kemu-nodeagent; do
	"$kubectl" -n "$kemuns" rollout status "$r" --timeout=5m | sed 's/^/   /'
done
"$kubectl" wait --for=condition=Available apiservice/v1alpha1.subresources.kemu.dev --timeout=3m | sed 's/^/   /'
schedulable() { [[ $("$kubectl" get node "$1" -o 'jsonpath={.metadata.labels.kemu\.dev/schedulable}') == true ]]; }
for n in "${nodes[@]}"; do
	wait_for 120 "node ${n%% *} labelled kemu.dev/schedulable=true" schedulable "${n%% *}" >/dev/null
done
"$kubectl" get nodes -L kemu.dev/schedulable -L kemu.dev/kvm | sed 's/^/   /'

step "kubectl apply -f $example, until Running with an IP and its guest agent connected"
# kemu-api's webhooks answer a moment after its Pods are ready (the
# Service's endpoints): the first apply may be refused for that.
wait_for 60 "kubectl apply -f $example" "$kubectl" -n "$vmns" apply -f "$example" | sed 's/^/   /'
vmi() { "$kubectl" -n "$vmns" get vmi "$vm" -o "jsonpath=$1"; }
running() { [[ $(vmi '{.status.phase}') == Running ]]; }
has_ip() { local ip; ip=$(vmi '{.status.interfaces[0].ipAddress}') && [[ -n $ip ]] && echo "$ip"; }
wait_for 300 "VMI $vm Running" running >/dev/null
say "Running $((SECONDS - step_t0)) s after apply"
ip=$(wait_for 300 "VMI $vm's IP" has_ip)
say "IP $ip $((SECONDS - step_t0)) s after apply"
agent() { [[ $(vmi '{.status.conditions[?(@.type=="AgentConnected")].status}') == True ]]; }
wait_for 300 "VMI $vm's guest agent connected (the guest booted)" agent
say "AgentConnected $((SECONDS - step_t0)) s after apply"
"$kubectl" -n "$vmns" get vm,vmi -o wide | sed 's/^/   /'
node0=$(vmi '{.status.nodeName}')

step "kemuctl console $vm (a command on the guest's serial console)"
# The user data's shell starts on the console once the guest is up (a
# line typed before waits in the guest's tty and runs then); the marker is
# computed in the guest, so the echoed command line never matches.
console_once() {
	# shellcheck disable=SC2016 # expanded by the guest's shell
	printf 'echo "demo-console-$((6*7)) $(uname -sr) up $(cut -d" " -f1 /proc/uptime) s"\n' |
		timeout 60 "$kemuctl" console "$vm" -n "$vmns" 2>&1 | tr -d '\r' | grep -m1 '^demo-console-42 '
}
out=$(wait_for 120 "the guest's console shell" console_once)
say "guest: $out"

step "kemuctl pause $vm, then unpause"
"$kemuctl" pause "$vm" -n "$vmns" | sed 's/^/   /'
paused() { vmi '{.status.conditions[?(@.type=="Paused")].status}'; }
say "Paused condition: $(paused)"
"$kemuctl" unpause "$vm" -n "$vmns" | sed 's/^/   /'
unpaused() { [[ -z $(paused) ]]; }
wait_for 60 "the Paused condition gone" unpaused >/dev/null
say "Paused condition: none; phase $(vmi '{.status.phase}')"

step "kemuctl migrate $vm --wait (live, from $node0 to the other node)"
"$kemuctl" migrate "$vm" -n "$vmns" --wait --timeout 10m | sed 's/^/   /'
node1=$(vmi '{.status.nodeName}')
if [[ $node1 == "$node0" ]]; then
	echo "demo-cluster: the VMI still runs on $node0 after the migration" >&2
	exit 1
fi
say "$vm runs on $node1 now (was $node0)"
out=$(wait_for 60 "the guest's console after the migration" console_once)
say "guest (same boot, its uptime went on): $out"

step "kubectl delete vm $vm"
"$kubectl" -n "$vmns" delete vm "$vm" --timeout=3m | sed 's/^/   /'
gone() { [[ -z $("$kubectl" get pods -A -l "$launchers" -o name; "$kubectl" -n "$vmns" get vmi -o name) ]]; }
wait_for 180 "VMI $vm and its launcher Pods gone" gone
say "VMI and launcher Pods gone $((SECONDS - step_t0)) s after delete"

step "uninstall kemu (docs/deploy.md's order)"
"$kubectl" -n "$kemuns" delete daemonset kemu-nodeagent --cascade=foreground --timeout=3m | sed 's/^/   /'
"$kubectl" delete validatingwebhookconfiguration,mutatingwebhookconfiguration kemu-api --ignore-not-found | sed 's/^/   /'
"$kubectl" delete -k "$overlay" --ignore-not-found --timeout=3m >/dev/null
say "every object of $overlay deleted"
"$kubectl" get nodes -L kemu.dev/schedulable | sed 's/^/   /'

step "hack/cluster.sh down, then check that nothing is left"
started=false
bash hack/cluster.sh down | sed 's/^/   /'
after=$(snapshot)
for f in "$state/kubeconfig" "$state/pid"; do
	[[ ! -e $f ]] || after+=$'\n'"left: $f"
done
if [[ $after != "$before" ]]; then
	echo "demo-cluster: the host differs from before the demo:" >&2
	diff <(echo "$before") <(echo "$after") >&2 || true
	exit 1
fi
say "no process in a node's cgroup, no Pod network namespace, mounts, ip_forward and the node paths as before, no kubeconfig"
end_step

# The summary: make bench (hack/bench.sh) keeps these lines.
printf '\n== done in %d s: a VM on a 2-node cluster — Running with its IP, console, pause, unpause, live migration, delete — and nothing left\n' $((SECONDS - t0))
printf '%s\n' "${timings[@]}"
