//go:build linux

package shm

import (
	"testing"

	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// TestContract runs the transport contract (package transporttest) on shm;
// a killed rank is closed (in one process a rank cannot die alone; its
// goodbye is one more way of being reported down).
func TestContract(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, n int) *transporttest.World {
		ts, _, _ := cluster(t, n, clusterOpts{noReceiver: true})
		w := &transporttest.World{}
		for _, tr := range ts {
			w.Ranks = append(w.Ranks, transport.Transport(tr))
		}
		return w
	})
}
