package memnet

import (
	"context"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// TestContract runs the transport contract (package transporttest) on
// memnet; a killed rank is a Crash.
func TestContract(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, n int) *transporttest.World {
		net := New(n)
		t.Cleanup(net.Close)
		w := &transporttest.World{Kill: func(r int) { net.Crash(ftrma.Rank(r)) }}
		for r := range n {
			w.Ranks = append(w.Ranks, transport.Transport(net.Endpoint(ftrma.Rank(r))))
		}
		return w
	})
}

// TestAdmission runs the admission contract (transporttest.RunAdmission) on
// memnet: a spare's endpoint exists from the start (NewSpares) and admits
// the spares started before it; a killed rank is a Crash.
func TestAdmission(t *testing.T) {
	transporttest.RunAdmission(t, func(t testing.TB, live, spares int) *transporttest.Spares {
		net := NewSpares(live, spares)
		t.Cleanup(net.Close)
		w := &transporttest.Spares{Live: live, Kill: func(r int) { net.Crash(ftrma.Rank(r)) }}
		for r := range live + spares {
			var tr transport.Transport
			if r < live {
				tr = net.Endpoint(ftrma.Rank(r))
			}
			w.Ranks = append(w.Ranks, tr)
		}
		w.Start = func(s int, up, failed []int) (transport.Transport, string, func(context.Context) error) {
			e := net.Endpoint(ftrma.Rank(s))
			return e, "", func(context.Context) error {
				for _, r := range up {
					if r >= live {
						if err := e.Admit(ftrma.Rank(r), ""); err != nil {
							return err
						}
					}
				}
				return nil
			}
		}
		return w
	})
}
