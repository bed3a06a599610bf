//go:build !race && !(amd64 || arm64 || ppc64le || riscv64 || loong64 || s390x)

package transport

import "encoding/binary"

// storeWords stores src, 8 bytes at a time, into the aligned words d, each a
// whole-word store (never torn, per Go's memory model).
func storeWords(d []uint64, src []byte) {
	src = src[:8*len(d)]
	for i := range d {
		d[i] = binary.NativeEndian.Uint64(src[8*i:])
	}
}

// loadWords copies the aligned words s into dst, each a whole-word load.
func loadWords(dst []byte, s []uint64) {
	dst = dst[:8*len(s)]
	for i := range s {
		binary.NativeEndian.PutUint64(dst[8*i:], s[i])
	}
}
