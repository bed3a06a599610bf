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
// 0 and 1 meet through shm) and alternating (they meet through tcp). A
// killed rank is closed.
func TestContract(t *testing.T) {
	for _, c := range []struct {
		name   string
		hostOf func(r int) int
	}{
		{"pairs", func(r int) int { return r / 2 }},
		{"alternating", func(r int) int { return r % 2 }},
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
				w := newWorld(t, hosts, worldOpts{noReceiver: true})
				tw := &transporttest.World{}
				for _, m := range w.ts {
					tw.Ranks = append(tw.Ranks, transport.Transport(m))
				}
				return tw
			})
		})
	}
}
