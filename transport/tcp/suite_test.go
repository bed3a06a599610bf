package tcp

import (
	"testing"
	"time"

	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// TestContract runs the transport contract (package transporttest) on tcp,
// with and without spinning, plain and sealed; a killed rank is closed, as
// the kernel closes a dead process's sockets.
func TestContract(t *testing.T) {
	for _, c := range []struct {
		name string
		spin time.Duration
		seal SealMode
	}{{"park", -1, SealRemote}, {"spin", 0, SealRemote}, {"sealed park", -1, SealAll}, {"sealed spin", 0, SealAll}} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.Run(t, func(t testing.TB, n int) *transporttest.World {
				ts, _ := clusterSealed(t, n, c.spin, c.seal)
				w := &transporttest.World{}
				for _, tr := range ts {
					w.Ranks = append(w.Ranks, transport.Transport(tr))
				}
				return w
			})
		})
	}
}
