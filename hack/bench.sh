#!/usr/bin/env bash
# make bench: runs kemu's benchmarks and writes their figures, with the machine
# and the exact command, into docs/benchmarks.md (one section per suite,
# replaced in place; sections of other suites are kept). BENCH_SECTIONS="a b"
# runs only the named sections.
set -euo pipefail
cd "$(dirname "$0")/.."
doc=docs/benchmarks.md

machine() {
	local cpu
	cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
	printf -- '- machine: %s, %s cores, %s GiB RAM, kernel %s\n' "$cpu" "$(nproc)" \
		"$(awk '/^MemTotal/{printf "%.0f", $2/1048576}' /proc/meminfo)" "$(uname -r)"
	printf -- '- %s; %s; date %s; commit %s\n' "$(go version)" \
		"$(qemu-system-x86_64 --version 2>/dev/null | head -1 || echo 'no QEMU')" \
		"$(date -u +%Y-%m-%dT%H:%MZ)" "$(git describe --always --dirty 2>/dev/null || echo none)"
}

# section NAME TITLE COMMAND...: runs COMMAND, writes its benchmark lines.
section() {
	local name=$1 title=$2
	shift 2
	# BENCH_SECTIONS="a b": only those sections run (the others stay as
	# they are in the document).
	if [ -n "${BENCH_SECTIONS:-}" ] && [[ " ${BENCH_SECTIONS} " != *" ${name} "* ]]; then
		return 0
	fi
	echo "[bench] $title: $*"
	local out
	out=$("$@" 2>&1) || { echo "$out"; echo "[bench] $title failed" >&2; exit 1; }
	echo "$out" | grep -E '^Benchmark' || true
	local body
	body=$(
		printf '<!-- bench:%s -->\n## %s\n\n' "$name" "$title"
		machine
		printf -- '- command: `%s`\n\n```\n' "$*"
		echo "$out" | grep -E '^(Benchmark|goos|goarch|cpu)' || true
		# What the benchmarks log (b.Log: breakdowns, what stopped a run),
		# the lines under each "--- BENCH:".
		# Also a script's summary: "== done" and the indented lines under it
		# (hack/demo-cluster.sh).
		echo "$out" | awk '/^(--- BENCH:|== done)/ { keep = 1; print; next } keep && /^    / { print; next } { keep = 0 }'
		printf '```\n<!-- /bench:%s -->\n' "$name"
	)
	[ -f "$doc" ] || printf '# Benchmarks\n\nWritten by `make bench` (hack/bench.sh); each section names the machine and the command that produced it.\n' >"$doc"
	BODY="$body" awk -v name="$name" '
		BEGIN { start = "<!-- bench:" name " -->"; end = "<!-- /bench:" name " -->"; done = 0 }
		$0 == start { skipping = 1; next }
		skipping && $0 == end { skipping = 0; print ENVIRON["BODY"]; done = 1; next }
		skipping { next }
		{ print }
		END { if (!done) { print ""; print ENVIRON["BODY"] } }
	' "$doc" >"$doc.tmp"
	mv "$doc.tmp" "$doc"
}

section api "API: decode, default, validate, convert" \
	go test -run '^$' -bench . -benchmem -count 5 ./api/...
section testguest "Test guest: QEMU (TCG) boot to the ready marker" \
	go test -tags qemu -run '^$' -bench . -benchtime 5x -timeout 20m ./test/testguest/
section qmp "QMP: query-status round trip vs a raw socket, event fan-out (real QEMU, TCG)" \
	go test -tags qemu -run '^$' -bench . -benchmem -count 3 -timeout 20m ./qmp/
section launcher "Launcher: start latency (exec -> running, excluding guest boot); memory of the per-VM process with one booted 256Mi guest — kemu-launcher as in its Pod (release binary, pod network, own cgroup, WatchDomain open, GetStats answered) vs kemuctl run" \
	go test -tags qemu -run '^$' -bench 'Start|LauncherRSS' -benchtime 10x -timeout 40m ./launcher/ ./cmd/kemu-launcher/
section launcher-soak "Launcher soak: kemu-launcher as in its Pod with a WatchDomain stream open and GetStats every 10 s for 10 minutes (KEMU_SOAK), memory sampled every 10 s" \
	go test -tags qemu -run '^$' -bench LauncherSoak -benchtime 1x -timeout 40m ./cmd/kemu-launcher/
section ci-step "CI step: kemuctl run of the test guest to exit (TCG), wait for the agent and shut down (baseline) vs. issue 19's step: exec uname -a, exec false, --junit, --serial-log (wall time of the kemuctl process)" \
	go test -tags qemu -run '^$' -bench BenchmarkCIStep -benchtime 1x -timeout 20m ./cmd/kemuctl/
section controller "Controller: 200 VMIs created at once -> 200 launcher Pods, VMIs Scheduling (real etcd + kube-apiserver; restart=true replaces the controller halfway)" \
	go test -tags cluster -run '^$' -bench BenchmarkBurst200 -benchtime 1x -timeout 20m ./controller/vmi/
section images "Images: make images (kemu-launcher, kemu-controller, kemu-api, kemu-nodeagent as OCI archives, warm Go build cache); compressed and unpacked sizes" \
	go test -tags qemu -run '^$' -bench Images -benchtime 1x -timeout 20m ./hack/images/
section cluster "Test cluster: control plane + N nodes (each in its own namespaces) from warm binaries: start, idle RSS, stop; 1 node vs 2 nodes" \
	go test -tags cluster -run '^$' -bench BenchmarkNodes -benchtime 3x -timeout 20m ./test/cluster/
section migration "Migration: idle 256 MiB guest between two launchers over unix sockets, and through two node agents' migration proxies (TLS 1.3 on loopback), each vs two plain QEMUs migrating directly (same argv and capabilities) in the same loop; a guest dirtying 24 MiB/s at 16 MiB/s and a 20 ms downtime limit, without and with auto-converge, and post-copy after 5 s (TCG)" \
	go test -tags qemu -run '^$' -bench BenchmarkMigration -benchtime 5x -timeout 40m ./launcher/
# e2e: needs the images current (skipped when up to date) and the test guest's images.
bash hack/images/build.sh >/dev/null
section e2e "End to end: VMI create -> Running on one real node (kubelet, containerd 2.4, kemu deployed with kubectl apply -k, containerDisks as image volumes; TCG), 1 VMI alone and a burst of 10, each broken into stages, vs plain Pods of the launcher image on the same node in the same run; API writes per VMI" \
	go test -tags 'cluster qemu' -run '^$' -bench CreateToRunning -benchtime 3x -timeout 30m ./test/e2e/
section e2e-density "End to end: density — idle 128Mi test-guest VMs (10m CPU request) started one after another on one node until the first fails to start; per VM the Pod's working set vs its memory request, QEMU RSS, launcher RSS/PSS, cost vs guest RAM; node agent and controller RSS with 1, 10, 50 VMIs (TCG)" \
	go test -tags 'cluster qemu' -run '^$' -bench Density -benchtime 1x -timeout 60m ./test/e2e/
section e2e-api "End to end: kemu-api — the webhooks' cost on a VMI create (100 server-side dry-run creates with and without them, p50/p95), console round trip (50 keystrokes echoed by a shell on the guest's serial console through kube-apiserver, kemu-api, the node agent, the launcher; p50/p95; TCG)" \
	go test -tags 'cluster qemu' -run '^$' -bench BenchmarkKemuAPI -benchtime 1x -timeout 30m ./test/e2e/
section e2e-migration "End to end: create VirtualMachineInstanceMigration -> Succeeded, an idle 128Mi guest between the two nodes (kemu deployed with kubectl apply -k; TCG), median of 5; QEMU's total and downtime; API writes per migration" \
	go test -tags 'cluster qemu' -run '^$' -bench BenchmarkMigration -benchtime 5x -timeout 30m ./test/e2e/
section e2e-scrape "End to end: one scrape of a node agent's /metrics with 1 and 10 VMIs on its node (each launcher asked: scrapes 5.5 s apart, past the collector's cache), wall time p50/max, bytes, the node agent's CPU per scrape (an upper bound: its idle work in between included); with 1 VMI the guest's shell-loop rate without and with a scrape every second (TCG)" \
	go test -tags 'cluster qemu' -run '^$' -bench BenchmarkScrape -benchtime 1x -timeout 30m ./test/e2e/
section demo-cluster "make demo-cluster: from no cluster to a VM on two nodes (Running, console, pause, unpause, live migration, delete) and back to nothing, wall time per step (warm _out: binaries, images, test guest built; TCG)" \
	bash hack/demo-cluster.sh
echo "[bench] figures written to $doc"
