//go:build linux && !amd64

package shm

import "sync/atomic"

// announce stores v into the reader word w, which only this process writes.
// Elsewhere the memory model is weaker than x86-TSO, and Go's atomic store
// (a store-release on arm64) is what keeps the announcement ahead of the
// loads that follow it.
func announce(w *uint64, v uint64) { atomic.StoreUint64(w, v) }
