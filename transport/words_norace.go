//go:build !race && (amd64 || arm64 || ppc64le || riscv64 || loong64 || s390x)

package transport

import "unsafe"

// storeWords stores src, 8 bytes at a time, into the aligned words d. Each
// store is one whole-word move (an aligned word store is never torn, per Go's
// memory model), much cheaper than a sequentially consistent atomic store.
// These platforms load unaligned words from src directly.
func storeWords(d []uint64, src []byte) {
	_ = src[8*len(d)-1]
	sp := unsafe.Pointer(unsafe.SliceData(src))
	for i := range d {
		d[i] = *(*uint64)(unsafe.Add(sp, 8*i))
	}
}

// loadWords copies the aligned words s into dst, 8 bytes at a time, each a
// whole-word load.
func loadWords(dst []byte, s []uint64) {
	_ = dst[8*len(s)-1]
	dp := unsafe.Pointer(unsafe.SliceData(dst))
	for i := range s {
		*(*uint64)(unsafe.Add(dp, 8*i)) = s[i]
	}
}
