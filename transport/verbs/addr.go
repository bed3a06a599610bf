package verbs

import (
	"fmt"

	"github.com/ftrma/ftrma"
)

// A verbs address (Address.String) is O(size) bytes: it lists the number of
// a queue pair per rank. Each peer needs only its own one, so the rendezvous
// takes it split (SplitAddress): every peer gets the common part, and rank r
// the number of the queue pair for r. Joined again, common + part is the
// address as r needs it, with one queue pair number, which Connect takes in
// place of the whole.

// PartWidth is the length of the part of a verbs address for one rank: the
// number of the queue pair for that rank, in hexadecimal, 24 bits.
const PartWidth = 6

// Common is the part of a every peer needs: its text up to the queue pair
// numbers.
func (a Address) Common() string {
	a.QPN = nil
	return a.String()
}

// Part is the part of a for rank r: the number of its queue pair for r,
// PartWidth hexadecimal digits.
func (a Address) Part(r int) string { return fmt.Sprintf("%06x", a.QPN[r]) }

// SplitAddress splits an address as Addr returns it into the part every
// peer needs and the part for each rank r (parts[r], PartWidth bytes):
// common + parts[r] is the address as r needs it.
func SplitAddress(s string) (common string, parts []string, err error) {
	a, err := ParseAddress(s)
	if err != nil {
		return "", nil, err
	}
	parts = make([]string, len(a.QPN))
	for r := range parts {
		parts[r] = a.Part(r)
	}
	return a.Common(), parts, nil
}

// qpnFor is the number of the queue pair that the rank whose address is a
// made for rank r of a job of size ranks: a lists one per rank (as Addr
// returns it), or only r's (as r gets it from SplitAddress's parts).
func (a Address) qpnFor(r ftrma.Rank, size int) (uint32, error) {
	switch len(a.QPN) {
	case size:
		return a.QPN[r], nil
	case 1:
		return a.QPN[0], nil
	}
	return 0, fmt.Errorf("verbs address lists %d queue pairs for %d ranks: %w", len(a.QPN), size, ftrma.ErrInvalid)
}
