package memnet

import (
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
