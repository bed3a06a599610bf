package store

import "testing"

// FuzzParseSurvivor: a survivor's part of a Grow exchange comes from
// another rank. parseSurvivor never panics, whatever the bytes and the
// world's size.
func FuzzParseSurvivor(f *testing.F) {
	f.Add([]byte{0}, 4)
	f.Add(append([]byte{1}, []byte(growMagic)...), 8)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		parseSurvivor(b, max(1, n%4096))
	})
}
