//go:build linux

package shm

import "unsafe"

// On x86-64 the middle of a word-atomic copy goes 16 bytes at a time, with
// 16-byte aligned SSE accesses on the shared side: an aligned 16-byte access
// is carried out whole on processors with AVX (Intel and AMD document it),
// and on any x86-64 processor it never splits an aligned 8-byte word. This
// is about twice as fast as the 8-byte loop. (memmove is not used: it tears
// words, see storeTo.)

//go:noescape
func storeAligned16(dst, src *byte, n uintptr)

//go:noescape
func loadAligned16(dst, src *byte, n uintptr)

// storeWide stores the longest prefix of src that is a whole number of
// 16-byte blocks, into dst whose start is 16-byte aligned, and returns its
// length.
func storeWide(dst, src []byte) int {
	n := len(src) &^ 15
	if n > 0 {
		_ = dst[n-1]
		storeAligned16(unsafe.SliceData(dst), unsafe.SliceData(src), uintptr(n))
	}
	return n
}

// loadWide is storeWide for a load from src, 16-byte aligned, into dst.
func loadWide(dst, src []byte) int {
	n := len(dst) &^ 15
	if n > 0 {
		_ = src[n-1]
		loadAligned16(unsafe.SliceData(dst), unsafe.SliceData(src), uintptr(n))
	}
	return n
}
