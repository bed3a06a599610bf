#!/usr/bin/env bash
# The verbs suite: the RDMA transport tested for real on Soft-RoCE (rdma_rxe)
# in qemu guests, on a host without RDMA hardware (scripts/rxe-vm.sh boots
# them; see its header). Everything is built here with cgo and -tags verbs
# and shared into the guests over 9p:
#
#   one guest   the transport suite (transport/verbs), the window and store
#               suites over a verbs world (FTRMA_TEST_WORLDS=verbs), the
#               process suites (e2e) through ftrun --transport verbs, and
#               ftrun --respawn over verbs (launcher: TestVerbsProcessReplace)
#   two guests  the process suites with every job's ranks split over both
#               guests (an ftrun agent in guest 2), joined by a virtual wire,
#               over shm+verbs: shared memory between the ranks of a guest,
#               verbs between guests and for every atomic (Soft-RoCE's are
#               not the CPU's); TestRoutesByHost checks each rank's routes
#   bench       ftrma verbs put/get/CAS latency beside perftest on rxe0
#               (emulator times: only the ratios mean anything)
#
# Usage: scripts/verbs-test.sh [ci|full|one|two|bench]   (default ci)
#   ci     a bounded slice of each suite, one guest then two (about 9 minutes here)
#   full   every test of the suites
#   one    ci's one-guest part only; two: its two-guest part only
#   bench  only the latency comparison (VERBS_JSON=FILE keeps its JSON)
#
# When qemu, the guest kernel or the RDMA packages cannot be installed (no
# root, no network), it says so plainly and exits 0 with NOTHING counted as
# passed; any test failure exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-ci}
VM=$PWD/scripts/rxe-vm.sh
export RXEVM_MEM=${RXEVM_MEM:-2048} RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-1500}

say() { printf '== verbs: %s\n' "$*"; }

if ! setup_log=$("$VM" setup 2>&1); then
	echo "$setup_log" | tail -5
	say "NOT RUN: the Soft-RoCE guest cannot be set up on this machine (see above)."
	say "NOT RUN: nothing of the verbs suite counts as passed."
	exit 0
fi

share=$(mktemp -d /tmp/ftrma-verbs.XXXXXX)
trap 'rm -rf "$share"' EXIT
say "building verbs binaries into $share"
export CGO_ENABLED=1
go build -tags verbs -o "$share/bin/" ./cmd/ftrun ./cmd/ftkv ./e2e/testprog ./examples/rmademo ./examples/ftdemo ./examples/ckpt ./bench/rma/rank ./bench/verbslat
for p in transport/verbs window store e2e launcher; do
	go test -c -tags verbs -o "$share/$(basename $p).test" ./$p
done
if readelf -d "$share/bin/ftrun" | grep -q 'NEEDED.*libibverbs'; then
	say "FAIL: ftrun links libibverbs (it must load it at run time)"
	exit 1
fi

say "vet and unit tests of the verbs build on this host"
go vet -tags verbs ./... ./bench/...
go test -tags verbs -count=1 -run '^(TestAddressRoundTrip|TestChoose|TestAckTimeoutWithinBound|TestProbeOnThisHost)$' ./transport/verbs

# On this host (no RDMA device) the verbs-enabled ftrun refuses --transport
# verbs clearly, and a job over hosts falls back to TCP with the reason.
say "the verbs-enabled ftrun on this host, which has no RDMA device"
set +e
out=$("$share/bin/ftrun" -n 2 --transport verbs "$share/bin/rank" -lat 8:10:1 2>&1); code=$?
set -e
echo "$out" | head -3
if [ $code != 3 ] || ! grep -q "no usable RDMA device\|cannot load libibverbs" <<<"$out"; then
	say "FAIL: --transport verbs without a device: exit $code, want 3 and the reason"; exit 1
fi
export FTRMA_AGENT_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
"$share/bin/ftrun" agent --listen 127.0.0.1:0 --once 2> "$share/agent.log" &
agent=$!
for _ in $(seq 100); do grep -q listening "$share/agent.log" && break; sleep 0.1; done
addr=$(sed -n 's/.*listening on //p' "$share/agent.log")
set +e
out=$("$share/bin/ftrun" -v -n 2 --hosts "local:1,$addr:1" "$share/bin/rank" -lat 8:100:10 2>&1); code=$?
set -e
wait $agent || true
unset FTRMA_AGENT_SECRET
echo "$out" | grep -i "transport"
if [ $code != 0 ] || ! grep -q "transport shm+tcp (auto: .*RDMA verbs unusable here" <<<"$out"; then
	say "FAIL: a job over hosts did not fall back to TCP (exit $code):"; echo "$out"; exit 1
fi

# And on a host without libibverbs at all (hidden here in a private mount
# namespace): the binary still starts, says why verbs are out, falls back.
lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1 2>/dev/null || true)
if [ -n "$lib" ] && unshare -m true 2>/dev/null; then
	say "the verbs-enabled ftrun with libibverbs hidden"
	set +e
	out=$(unshare -m sh -c "mount --bind /dev/null '$lib' && '$share/bin/ftrun' -n 2 --transport verbs '$share/bin/rank' -lat 8:10:1" 2>&1); code=$?
	set -e
	echo "$out" | head -2
	if [ $code != 3 ] || ! grep -q "cannot load libibverbs" <<<"$out"; then
		say "FAIL: without libibverbs: exit $code, want 3 and the reason"; exit 1
	fi
else
	say "cannot hide libibverbs here (no unshare or no library): that check is not run"
fi

# What each mode runs: go test -run patterns.
case $MODE in
full)
	WINDOW_RUN=. STORE_RUN=. E2E_RUN='TestCountersAndLocks|TestKill|TestLockTakeover|TestStoppedRankIsFenced|TestStore|TestCkpt'
	E2E2_RUN="$E2E_RUN|TestRoutesByHost" ;;
ci | one | two | bench)
	WINDOW_RUN='TestCreateIsTheBuffer|TestCountersEightRanks|TestPutFlushGetFromThirdRank|TestSharedLocksCoexist|TestDynamicWindow|TestOperationSemantics|TestReplaceAccumulateNeverTorn'
	STORE_RUN='TestPutGetDeleteAcrossRanks|TestHeapReuse|TestTransaction|TestConcurrentWriters|TestCollidingKeysKeepTheirValues|TestConditionalWrites|TestTxGet$'
	# The store's linearizability test kills at fixed times, which in an
	# emulated guest can land before the job has started: full mode only.
	E2E_RUN='TestCountersAndLocks|TestKillWhileHammering|TestStoppedRankIsFenced|TestStoreUninvolved'
	E2E2_RUN='TestCountersAndLocks|TestKillWhileHammering/shm\+verbs/kill_1$|TestStoppedRankIsFenced|TestStoreUninvolved|TestRoutesByHost' ;;
*) echo "usage: $0 [ci|full|one|two|bench]" >&2; exit 2 ;;
esac

# The guest's environment for the suites: the emulator is many times slower
# than hardware, so the failure detector gets 2 s (in-process worlds 10 s).
ENVS="export FTRMA_TEST_WORLDS=verbs FTRMA_VERBS_BOUND=10s FTRMA_E2E_BINDIR=/host/bin FTRMA_E2E_TRANSPORTS=verbs FTRMA_E2E_HB_TIMEOUT=2s"
# suite NAME CMD...: run one suite in the guest, show its tail, remember failure.
SUITE='R=0
suite() {
	name=$1; shift
	t0=$(cut -d. -f1 /proc/uptime)
	if "$@" > /tmp/suite.log 2>&1; then st=ok; else st=FAIL; R=1; fi
	echo "== verbs suite $name: $st in $(( $(cut -d. -f1 /proc/uptime) - t0 ))s"
	if [ $st = ok ]; then grep -E "^(ok|PASS|---)" /tmp/suite.log | tail -3; else grep -v "^=== \(RUN\|PAUSE\|CONT\)" /tmp/suite.log | tail -80; fi
}'

if [ "$MODE" != bench ] && [ "$MODE" != two ]; then
	say "one guest: transport, window, store and process suites"
	"$VM" run "$share" "$ENVS
$SUITE
suite transport ./verbs.test -test.count=1 -test.timeout 300s -test.v
suite window ./window.test -test.count=1 -test.timeout 600s -test.v -test.run '$WINDOW_RUN'
suite store ./store.test -test.count=1 -test.timeout 600s -test.v -test.run '$STORE_RUN'
suite process ./e2e.test -test.count=1 -test.timeout 900s -test.v -test.run '$E2E_RUN'
suite respawn ./launcher.test -test.count=1 -test.timeout 300s -test.v -test.run 'TestVerbsProcessReplace'
exit \$R" || { say "FAIL: one-guest suites"; exit 1; }
fi

if [ "$MODE" != bench ] && [ "$MODE" != one ]; then
	say "two guests: process suites with the ranks split over both"
	secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
	rm -f "$share/.done" "$share/.agent"
	"$VM" run2 "$share" "$ENVS FTRMA_AGENT_SECRET=$secret FTRMA_E2E_TRANSPORTS=shm+verbs
$SUITE
if [ \$RXEVM_ID = 2 ]; then
	/host/bin/ftrun agent --listen \$RXEVM_IP:7770 > /tmp/agent.log 2>&1 &
	n=0; until grep -q listening /tmp/agent.log; do sleep 0.2; n=\$((n+1)); [ \$n -gt 150 ] && break; done
	cat /tmp/agent.log; touch /host/.agent
	n=0; until [ -f /host/.done ]; do sleep 1; n=\$((n+1)); [ \$n -gt 1500 ] && break; done
	kill %1; wait
	exit 0
fi
n=0; until [ -f /host/.agent ]; do sleep 0.2; n=\$((n+1)); [ \$n -gt 300 ] && { echo 'no agent in guest 2'; touch /host/.done; exit 1; }; done
export FTRMA_E2E_HOSTS=local,\$RXEVM_PEER:7770 FTRMA_E2E_SHARED_DIR=/host
suite process-two-guests ./e2e.test -test.count=1 -test.timeout 900s -test.v -test.run '$E2E2_RUN'
touch /host/.done
exit \$R" || { say "FAIL: two-guest suites"; exit 1; }
fi

if [ "$MODE" = bench ]; then
	say "latency beside perftest (one guest)"
	"$VM" run "$share" "./bin/verbslat -n 2000 -rounds 5 -json /host/verbs.json" || { say "FAIL: bench"; exit 1; }
	if [ -n "${VERBS_JSON:-}" ]; then cp "$share/verbs.json" "$VERBS_JSON"; fi
fi
say "passed ($MODE)"
