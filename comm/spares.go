package comm

import (
	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm/internal/admission"
	"github.com/ftrma/ftrma/transport"
)

// The runtime's handling of spares, for comm/commtest (see package
// admission). ftrun's start-up will drive the same calls: admit on every
// admission notice, newSpare in a spare's Init.
func init() {
	admission.Admit = func(c any, s ftrma.Rank) error { return c.(*Comm).rt.admit(s) }
	admission.Settle = func(c any) { c.(*Comm).rt.settle() }
	admission.NewSpare = func(t transport.Transport, cfg any, live, failed []ftrma.Rank) (any, error) {
		return newSpare(t, cfg.(Config), live, failed)
	}
	admission.Gone = func(c any, r ftrma.Rank) bool {
		rt := c.(*Comm).rt
		if r < 0 || int(r) >= rt.n {
			return false
		}
		return rt.isGone(r)
	}
}
