//go:build linux && cgo && verbs

package verbs

import (
	"testing"
	"time"

	"github.com/ftrma/ftrma"

	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// TestContract runs the transport contract (package transporttest) on
// verbs, on the device of the Soft-RoCE guest; a killed rank is closed.
func TestContract(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, n int) *transporttest.World {
		ts, _ := openWorld(t, n, 0, false)
		w := &transporttest.World{}
		for _, tr := range ts {
			w.Ranks = append(w.Ranks, transport.Transport(tr))
		}
		return w
	})
}

// spareJob opens live connected ranks of a job of live+spares ranks on the
// device, the spares absent, and says how to start a spare: Open with Late
// and the spares not started yet absent, PeerDown the failed ranks,
// Connect with the live ranks' addresses. The live ranks admit it with its
// whole address (every queue pair number), as a test can give one string
// to all; ftrun gives each its own part (see TestAdmitSplitAddress).
func spareJob(t testing.TB, live, spares int) *transporttest.Spares {
	t.Helper()
	return spareJobBound(t, live, spares, 2*time.Second)
}

// spareJobBound is spareJob with the transports' Config.Bound.
func spareJobBound(t testing.TB, live, spares int, bound time.Duration) *transporttest.Spares {
	t.Helper()
	needDevice(t)
	return transporttest.AddressedSpares(t, live, spares, func(r ftrma.Rank, absent []ftrma.Rank, late bool) (*Transport, error) {
		return Open(Config{Rank: r, Size: live + spares, GIDIndex: -1, Bound: bound, Logger: testLogger(t), Absent: absent, Late: late})
	})
}

// TestAdmission runs the admission contract (transporttest.RunAdmission) on
// verbs; a killed rank is closed.
func TestAdmission(t *testing.T) {
	transporttest.RunAdmission(t, func(t testing.TB, live, spares int) *transporttest.Spares {
		return spareJob(t, live, spares)
	})
}
