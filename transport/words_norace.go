//go:build !race

package transport

import "encoding/binary"

// storeWords stores src, 8 bytes at a time, into the aligned words d. Each
// store is one whole-word move (an aligned word store is never torn, per Go's
// memory model), much cheaper than a sequentially consistent atomic store.
func storeWords(d []uint64, src []byte) {
	src = src[:8*len(d)]
	for i := range d {
		d[i] = binary.NativeEndian.Uint64(src[8*i:])
	}
}
