package store

import (
	"bytes"
	"hash/crc32"
	"runtime"
)

// Copies and checksums of values run in pieces of yieldEvery bytes with a
// yield between them: a copy or CRC of a large value is one long stretch of
// assembly Go cannot preempt, and on a rank with GOMAXPROCS=1 (ftrun's
// setting when a host's ranks fill its CPUs) the failure detector's
// heartbeat would wait for it — a 100 MB value took longer than the
// detector's 60 ms timeout and got a healthy rank declared failed.
const yieldEvery = 1 << 20

// copyYielding is copy(dst, src), yielding between pieces.
func copyYielding(dst, src []byte) int {
	n := 0
	for len(src) > yieldEvery && len(dst) > yieldEvery {
		n += copy(dst[:yieldEvery], src[:yieldEvery])
		dst, src = dst[yieldEvery:], src[yieldEvery:]
		runtime.Gosched()
	}
	return n + copy(dst, src)
}

// crcYielding is crc32.Update(crc, castagnoli, b), yielding between pieces.
func crcYielding(crc uint32, b []byte) uint32 {
	for len(b) > yieldEvery {
		crc = crc32.Update(crc, castagnoli, b[:yieldEvery])
		b = b[yieldEvery:]
		runtime.Gosched()
	}
	return crc32.Update(crc, castagnoli, b)
}

// cloneYielding is slices.Clone(b) (nil stays nil), yielding between pieces.
func cloneYielding(b []byte) []byte {
	if b == nil {
		return nil
	}
	c := make([]byte, len(b))
	copyYielding(c, b)
	return c
}

// equalYielding is bytes.Equal(a, b), yielding between pieces.
func equalYielding(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for len(a) > yieldEvery {
		if !bytes.Equal(a[:yieldEvery], b[:yieldEvery]) {
			return false
		}
		a, b = a[yieldEvery:], b[yieldEvery:]
		runtime.Gosched()
	}
	return bytes.Equal(a, b)
}
