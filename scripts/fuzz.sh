#!/usr/bin/env bash
# Runs every fuzz target of the module (each func Fuzz* that `go test -list`
# finds) for a bounded number of executions, one target after the other, and
# fails if any finds a failing input, naming the file it was written to.
#
#	scripts/fuzz.sh                 every target, FUZZTIME each
#	scripts/fuzz.sh FuzzParseFrame  only the targets whose name matches
#
# FUZZTIME (default 20000x) bounds each target: an execution count, not a
# duration, because a duration-bounded -fuzz run can fail with a bare
# "context deadline exceeded" at its end (go.dev/issue/75804, fixed in Go
# 1.27). On this project's 2-core machine, loaded, with the build cache warm,
# the 17 targets took 32 s at 20000x and 60 s at 50000x; 29 targets took 86 s
# at 30000x in CI. The default keeps CI's whole run under 20 minutes; a
# longer hunt is FUZZTIME=500000x (each target's seeds and the inputs that
# once failed, in testdata/fuzz, run in every go test anyway).
# FUZZPARALLEL sets the fuzzing workers (default: go test's, GOMAXPROCS).
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-20000x}
only=${1:-.}
parallel=()
if [ -n "${FUZZPARALLEL:-}" ]; then
	parallel=(-parallel "$FUZZPARALLEL")
fi

# Packages with a fuzz target: the directories of (tracked) test files that declare
# one, then `go test -list` for the targets the build really has (build tags
# and all).
mapfile -t dirs < <({ git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go'; } | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u)
if [ "${#dirs[@]}" -eq 0 ]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi

targets=()
for d in "${dirs[@]}"; do
	names=$(go test -list '^Fuzz' "./$d" | grep '^Fuzz' || true)
	for n in $names; do
		if [[ $n =~ $only ]]; then
			targets+=("$d $n")
		fi
	done
done
if [ "${#targets[@]}" -eq 0 ]; then
	echo "fuzz.sh: no fuzz target matches $only" >&2
	exit 1
fi

echo "fuzz.sh: ${#targets[@]} targets, $fuzztime each"
failed=()
start=$SECONDS
for t in "${targets[@]}"; do
	read -r d n <<<"$t"
	t0=$SECONDS
	log=$(mktemp)
	if go test -run '^$' -fuzz "^$n\$" -fuzztime "$fuzztime" "${parallel[@]}" -timeout 10m "./$d" >"$log" 2>&1; then
		echo "ok   $n ./$d ($((SECONDS - t0)) s)"
	else
		echo "FAIL $n ./$d ($((SECONDS - t0)) s)"
		sed 's/^/    /' "$log"
		# go test names the input it wrote relative to the package.
		crasher=$(grep -o 'testdata/fuzz/[^ ]*' "$log" | head -n1 || true)
		if [ -n "$crasher" ]; then
			echo "    failing input: $d/$crasher"
			echo "    rerun it: go test -run '^$n/$(basename "$crasher")\$' ./$d"
			failed+=("$n: $d/$crasher")
		else
			failed+=("$n: ./$d (no input written; see the output above)")
		fi
	fi
	rm -f "$log"
done

echo "fuzz.sh: ${#targets[@]} targets in $((SECONDS - start)) s"
if [ "${#failed[@]}" -gt 0 ]; then
	echo "fuzz.sh: ${#failed[@]} failed:"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
