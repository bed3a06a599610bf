package comm

import (
	"bytes"
	"testing"

	"github.com/ftrma/ftrma"
)

// FuzzParseReplace: a Replace payload reaches a spare from whoever asked
// for it. parseReplace never panics, and a plan it accepts encodes back to
// the same bytes.
func FuzzParseReplace(f *testing.F) {
	f.Add(replacePlan{id: 7, members: []ftrma.Rank{0, 1, 2}, failed: []int{1}, index: 0}.encode(), 4)
	f.Add(replacePlan{id: 9, members: []ftrma.Rank{0, 3, 2, 5}, failed: []int{1, 3}, index: 1, prev: []ftrma.Rank{6}}.encode(), 8)
	f.Add([]byte(replaceMagic), 2)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		n = max(1, n%1024)
		p, ok := parseReplace(b, n)
		if ok && !bytes.Equal(p.encode(), b) {
			t.Fatalf("parseReplace(% x) = %+v, which encodes to % x", b, p, p.encode())
		}
	})
}

// FuzzReadAnswer: a reduction's answer comes from its root over the
// network. readAnswer never panics.
func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte{reduceAbandoned})
	f.Add([]byte{0, 0, 0, 0, 1, 9, 9})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		readAnswer("allreduce", 0, b)
	})
}
