package verbs

import (
	"net"
	"testing"

	"github.com/ftrma/ftrma"
)

// FuzzParseAddress: a verbs address comes from the rendezvous, as a whole
// or joined from a common part and a rank's part. ParseAddress never
// panics; what it accepts prints as an address that parses to the same
// thing, and splits into parts that each name their rank's queue pair.
func FuzzParseAddress(f *testing.F) {
	a := Address{LID: 7, PSN: 0xabcdef, MTU: 3, Table: 0x7f12_3456_7000, TableKey: 0x1234, QPN: []uint32{0x11, 0, 0xffffff}}
	copy(a.GID[:], net.ParseIP("::ffff:198.18.0.1"))
	f.Add(a.String())
	f.Add(a.Common() + a.Part(2))
	f.Add("verbs1:" + "00/0/0/1/0/0/")
	f.Add("tcp:127.0.0.1:5")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			return
		}
		b, err := ParseAddress(a.String())
		if err != nil || b.String() != a.String() {
			t.Fatalf("%q parsed as %+v, which prints as %q and parses back as %+v (%v)", s, a, a.String(), b, err)
		}
		common, parts, err := SplitAddress(s)
		if err != nil || len(parts) != len(a.QPN) {
			t.Fatalf("SplitAddress(%q): %d parts, %v; want %d", s, len(parts), err, len(a.QPN))
		}
		for r, p := range parts {
			v, err := ParseAddress(common + p)
			if err != nil {
				t.Fatalf("rank %d's view %q: %v", r, common+p, err)
			}
			q, err := v.qpnFor(ftrma.Rank(r), len(parts))
			if err != nil || q != a.QPN[r] {
				t.Fatalf("rank %d's view names queue pair %x (%v), want %x", r, q, err, a.QPN[r])
			}
		}
	})
}
