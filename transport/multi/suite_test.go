//go:build linux

package multi_test

import (
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// TestContract runs the transport contract (package transporttest) on
// multi, with the ranks spread over pretend hosts two ways: in pairs (ranks
// 0 and 1 meet through shm) and alternating (they meet through tcp), and
// in pairs with every atomic through tcp, which reaches every rank and
// says its atomics are not the CPU's (as verbs on Soft-RoCE beside shm). A
// killed rank is closed.
func TestContract(t *testing.T) {
	for _, c := range []struct {
		name   string
		hostOf func(r int) int
		split  bool
	}{
		{"pairs", func(r int) int { return r / 2 }, false},
		{"alternating", func(r int) int { return r % 2 }, false},
		{"pairs, atomics through tcp", func(r int) int { return r / 2 }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.Run(t, func(t testing.TB, n int) *transporttest.World {
				var hosts [][]ftrma.Rank
				for r := range n {
					h := c.hostOf(r)
					for len(hosts) <= h {
						hosts = append(hosts, nil)
					}
					hosts[h] = append(hosts[h], ftrma.Rank(r))
				}
				w := newWorld(t, hosts, worldOpts{noReceiver: true, splitAtomics: c.split})
				tw := &transporttest.World{}
				for _, m := range w.ts {
					tw.Ranks = append(tw.Ranks, transport.Transport(m))
				}
				return tw
			})
		})
	}
}
