#!/usr/bin/env bash
# The project's test command (README, .ci/run): static checks, the race-enabled
# test suite (unit, memnet simulations, and process tests through ftrun over
# shared memory and TCP), a bounded run of every fuzz target (scripts/fuzz.sh),
# and the RDMA verbs suite in Soft-RoCE guests (scripts/verbs-test.sh).
#
# FUZZTIME (an execution count per target, default scripts/fuzz.sh's) bounds
# the fuzzers. FTRMA_LONG=1 enables long soaks.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go mod tidy (the root module and bench/, each on its own: what a user of the module gets)"
GOWORK=off go mod tidy -diff
(cd bench && GOWORK=off go mod tidy -diff)

echo "== go vet"
go vet ./... ./bench/...

echo "== CGO_ENABLED=0 go build"
CGO_ENABLED=0 go build ./... ./bench/...

echo "== go test -race (all but e2e, whose process tests build their binaries without -race and run below)"
go test -race -count=1 -timeout 15m $(go list ./... ./bench/... | grep -v '/e2e$')

echo "== go test (without race: paths the race build replaces, e.g. tcp's in-place large writes;"
echo "   the full 256-rank x 1,000-seed agreement simulation; process tests at real timing)"
go test -count=1 -timeout 20m ./transport/... ./window/... ./agree/... ./failure/... ./revoke/... ./e2e/...

echo "== fuzz every target (scripts/fuzz.sh)"
./scripts/fuzz.sh

# The RDMA verbs transport on Soft-RoCE in qemu guests (installs qemu and the
# guest kernel with apt-get when it can; says plainly when it cannot).
if [ "${FTRMA_VERBS:-1}" != 0 ]; then
	echo "== verbs suite (scripts/verbs-test.sh ci; FTRMA_VERBS=0 skips it)"
	./scripts/verbs-test.sh ci
fi
