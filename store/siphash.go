package store

import (
	"encoding/binary"
	"math/bits"
)

// sipKey is a SipHash-2-4 key: 128 secret bits agreed by the ranks at Open.
type sipKey struct{ k0, k1 uint64 }

// sipHash24 is SipHash-2-4 (Aumasson and Bernstein, 2012) of msg under k: a
// keyed 64-bit hash whose collisions cannot be found without the key, so
// that nobody can choose keys that pile up in one slot chain or one rank.
func sipHash24(k sipKey, msg []byte) uint64 {
	v0 := k.k0 ^ 0x736f6d6570736575
	v1 := k.k1 ^ 0x646f72616e646f6d
	v2 := k.k0 ^ 0x6c7967656e657261
	v3 := k.k1 ^ 0x7465646279746573
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13)
		v1 ^= v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16)
		v3 ^= v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21)
		v3 ^= v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17)
		v1 ^= v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	n := len(msg)
	for ; len(msg) >= 8; msg = msg[8:] {
		m := binary.LittleEndian.Uint64(msg)
		v3 ^= m
		round()
		round()
		v0 ^= m
	}
	// The last block: the remaining bytes, and the length's low byte on top.
	var last [8]byte
	copy(last[:], msg)
	last[7] = byte(n)
	m := binary.LittleEndian.Uint64(last[:])
	v3 ^= m
	round()
	round()
	v0 ^= m
	v2 ^= 0xff
	round()
	round()
	round()
	round()
	return v0 ^ v1 ^ v2 ^ v3
}
