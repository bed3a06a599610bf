//go:build linux

package shm

// announce stores v into the reader word w, which only this process writes.
// On x86-64 an aligned 8-byte store is whole, and stores become visible in
// program order (x86-TSO), so a plain store does: what it does not order, a
// later load of this thread, is what barrier orders for the readers that
// need it. A sequentially consistent store (XCHG) would cost as much as the
// read-modify-writes the fast path exists to avoid.
func announce(w *uint64, v uint64) { *w = v }
