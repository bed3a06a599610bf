//go:build linux && cgo && verbs

package verbs

import (
	"testing"

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
