#!/usr/bin/env bash
# Runs each fuzz target (PKG:Target ...) for FUZZTIME. Go fuzzes one target
# per run. A failing input is written to the package's
# testdata/fuzz/<Target>/, which every go test replays, and fails the run.
#
# Go 1.26's fuzz coordinator can end a clean run with a bare "context
# deadline exceeded" when -fuzztime expires while a worker is mid-call
# (golang/go#75804, fixed in Go 1.27): such a run wrote no input and printed
# nothing else, and is reported here and not counted as a failure. Any other
# failure, or one that left a new input, fails.
set -euo pipefail
FUZZTIME=${FUZZTIME:-15s}
GO=${GO:-go}
for t in "$@"; do
	pkg=${t%%:*} target=${t#*:}
	corpus="$pkg/testdata/fuzz/$target"
	before=$(find "$corpus" -maxdepth 1 -type f -printf '%f\n' 2>/dev/null | sort || true)
	echo "fuzz $target ($pkg, $FUZZTIME)"
	log=$(mktemp)
	if "$GO" test -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1 | tee "$log"; then
		rm -f "$log"
		continue
	fi
	after=$(find "$corpus" -maxdepth 1 -type f -printf '%f\n' 2>/dev/null | sort || true)
	failure=$(sed -n '/^--- FAIL: /,/^FAIL$/p' "$log" | grep -v -e '^--- FAIL: ' -e '^FAIL$' | sed 's/^ *//')
	rm -f "$log"
	if [ "$before" = "$after" ] && [ "$failure" = "context deadline exceeded" ]; then
		echo "fuzz $target: ended with Go's fuzztime race (golang/go#75804), no failing input: not a failure"
		continue
	fi
	echo "fuzz $target failed; new inputs in $corpus:" >&2
	comm -13 <(echo "$before") <(echo "$after") >&2
	exit 1
done
