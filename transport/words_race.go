//go:build race

package transport

import (
	"encoding/binary"
	"sync/atomic"
)

// storeWords stores src into the aligned words d with atomic stores, so that
// the race detector sees remote writes synchronize with atomic readers.
func storeWords(d []uint64, src []byte) {
	for i := range d {
		atomic.StoreUint64(&d[i], binary.NativeEndian.Uint64(src[8*i:]))
	}
}

// loadWords copies the aligned words s into dst with atomic loads.
func loadWords(dst []byte, s []uint64) {
	for i := range s {
		binary.NativeEndian.PutUint64(dst[8*i:], atomic.LoadUint64(&s[i]))
	}
}
