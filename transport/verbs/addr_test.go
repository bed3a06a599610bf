package verbs

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/ftrma/ftrma"
)

// An address splits into a common part and a part per rank, each
// PartWidth bytes; joined, common + parts[r] is an address that names r's
// queue pair only, with everything else of the whole, and Connect's choice
// of the queue pair is the same from either.
func TestSplitAddress(t *testing.T) {
	a := Address{LID: 7, PSN: 0xabcdef, MTU: 3, Table: 0x7f12_3456_7000, TableKey: 0x1234, QPN: []uint32{0x11, 0, 0xffffff, 0xabc}}
	copy(a.GID[:], net.ParseIP("::ffff:198.18.0.1"))
	const size = 4
	common, parts, err := SplitAddress(a.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != size || !strings.HasPrefix(a.String(), common) {
		t.Fatalf("split %q into %q and %q", a.String(), common, parts)
	}
	for r, p := range parts {
		if len(p) != PartWidth {
			t.Errorf("part %d %q is not %d bytes", r, p, PartWidth)
		}
		b, err := ParseAddress(common + p)
		if err != nil {
			t.Fatal(err)
		}
		whole, err1 := a.qpnFor(ftrma.Rank(r), size)
		view, err2 := b.qpnFor(ftrma.Rank(r), size)
		if err1 != nil || err2 != nil || whole != a.QPN[r] || view != a.QPN[r] {
			t.Errorf("rank %d: queue pair %x (%v) from the whole, %x (%v) from its part, want %x", r, whole, err1, view, err2, a.QPN[r])
		}
		b.QPN = a.QPN
		if b.String() != a.String() {
			t.Errorf("rank %d's view %q differs from the whole %q beyond the queue pair", r, common+p, a.String())
		}
	}
	if _, err := a.qpnFor(0, size+1); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("qpnFor with %d queue pairs for %d ranks: %v, want ErrInvalid", size, size+1, err)
	}
	if _, err := ParseAddress(common); err == nil {
		t.Errorf("the common part %q parses as an address", common)
	}
	if _, _, err := SplitAddress("tcp:127.0.0.1:5"); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("SplitAddress of a TCP address: %v, want ErrInvalid", err)
	}
}
