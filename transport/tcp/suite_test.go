package tcp

import (
	"testing"
	"time"

	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// TestContract runs the transport contract (package transporttest) on tcp,
// with and without spinning; a killed rank is closed, as the kernel closes
// a dead process's sockets.
func TestContract(t *testing.T) {
	for _, c := range []struct {
		name string
		spin time.Duration
	}{{"park", -1}, {"spin", 0}} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.Run(t, func(t testing.TB, n int) *transporttest.World {
				ts, _ := cluster(t, n, c.spin)
				w := &transporttest.World{}
				for _, tr := range ts {
					w.Ranks = append(w.Ranks, transport.Transport(tr))
				}
				return w
			})
		})
	}
}
