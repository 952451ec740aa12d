#!/usr/bin/env bash
# A throw-away Kubernetes on this machine (hack/cluster: etcd, kube-apiserver,
# kube-controller-manager; with --nodes N also kube-scheduler and N nodes, each
# in its own namespaces with containerd and a kubelet), in the background,
# stopped by pid.
#
#   hack/cluster.sh up [--nodes N | --node] [--no-crds]  # prints what to use (below)
#   hack/cluster.sh down     # stops exactly what up started, removes its kubeconfig, then checks nothing is left
#   hack/cluster.sh status   # the same as up prints, while it runs
#
# up and status print the KUBECONFIG to export, the kubectl to use (the
# cluster's own, _out/k8s/bin/kubectl: a kubectl on PATH may be far older)
# and each node's containerd socket with the ctr command that imports an
# image archive where that node's kubelet sees it.
#
# State: _out/cluster/{pid,log,kubeconfig}; down keeps only the log (and the
# cluster binary it built). The empty /run/kemu-test-node.lock stays: every
# cluster with nodes flocks it, and removing it would let two lock different
# files. Needs `make k8s` (and root for nodes).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${root}/_out/cluster"
pidfile="${state}/pid"

running() { [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

up() {
	local args=(-controller-manager -kubeconfig "${state}/kubeconfig")
	while (($#)); do
		case "$1" in
		--node) args+=(-nodes 1) ;;
		--nodes) shift; args+=(-nodes "${1:?--nodes needs a number}") ;;
		--nodes=*) args+=(-nodes "${1#--nodes=}") ;;
		--no-crds) args+=(-crds=false) ;;
		*) echo "cluster.sh up: unknown option $1" >&2; exit 2 ;;
		esac
		shift
	done
	if running; then
		echo "cluster.sh: already running (pid $(cat "$pidfile")); export KUBECONFIG=${state}/kubeconfig"
		exit 0
	fi
	mkdir -p "$state"
	(cd "$root" && go build -o "${state}/cluster" ./hack/cluster)
	# Not setsid: it may fork, and the pid recorded must be the cluster's.
	(cd "$root" && exec "${state}/cluster" "${args[@]}" >"${state}/log" 2>&1 </dev/null) &
	echo $! >"$pidfile"
	# 300 s to get ready once the cluster holds the node lock: while
	# another test process's node runs (the log's last line says it waits
	# for the lock), the clock does not run.
	local deadline=$((SECONDS + 300))
	until grep -qx ready "${state}/log" 2>/dev/null; do
		if tail -n 1 "${state}/log" 2>/dev/null | grep -q 'waiting for .*lock'; then
			deadline=$((SECONDS + 300))
		fi
		if ! running; then
			echo "cluster.sh: the cluster failed to start:" >&2
			tail -20 "${state}/log" >&2
			rm -f "$pidfile"
			exit 1
		fi
		if ((SECONDS > deadline)); then
			echo "cluster.sh: not ready 300 s after it got the node lock; stopping it (log: ${state}/log)" >&2
			down
			exit 1
		fi
		sleep 0.2
	done
	summary
}

# summary prints what a user of the running cluster needs (the log's
# KUBECONFIG=, BIN= and NODE= lines, written by hack/cluster).
summary() {
	local log="${state}/log" bin name sock
	bin="$(sed -n 's/^BIN=//p' "$log")"
	echo "export KUBECONFIG=${state}/kubeconfig"
	echo "kubectl: ${bin}/kubectl (the cluster's own version; e.g. alias kubectl=${bin}/kubectl)"
	while read -r name sock; do
		echo "node ${name}: containerd ${sock}"
		echo "  import an image: ${bin}/ctr --address ${sock} --namespace k8s.io images import IMAGE.tar"
	done < <(sed -n 's/^NODE=//p' "$log")
}

down() {
	if ! running; then
		echo "cluster.sh: not running"
		rm -f "$pidfile"
		return 0
	fi
	local pid deadline=$((SECONDS + 120))
	pid="$(cat "$pidfile")"
	kill -TERM "$pid"
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS > deadline)); then
			echo "cluster.sh: pid $pid still running after 120 s; killing it" >&2
			kill -KILL "$pid"
			break
		fi
		sleep 0.2
	done
	rm -f "$pidfile" "${state}/kubeconfig"
	local dir
	dir="$(sed -n 's/^DIR=//p' "${state}/log")"
	if [[ -n "$dir" ]] && ! left="$("${state}/cluster" -leftovers "$dir")"; then
		echo "cluster.sh: stopped, but left behind:" >&2
		echo "$left" >&2
		exit 1
	fi
	echo "cluster.sh: stopped; nothing left behind"
}

case "${1:-}" in
up) shift; up "$@" ;;
down) down ;;
status) if running; then echo "running (pid $(cat "$pidfile"))"; summary; else echo "not running"; exit 1; fi ;;
*) sed -n '2,/^set /{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
