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
		name  string
		spin  time.Duration
		seal  SealMode
		keyed bool
	}{{"park", -1, SealRemote, false}, {"spin", 0, SealRemote, false}, {"sealed park", -1, SealAll, false}, {"sealed spin", 0, SealAll, false},
		{"host keys sealed park", -1, SealAll, true}} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.Run(t, func(t testing.TB, n int) *transporttest.World {
				ts, _ := clusterConfig(t, n, func(cfg *Config) {
					cfg.Spin, cfg.Seal = c.spin, c.seal
					if c.keyed {
						cfg.Secret, cfg.HostKey = nil, hostKeys[int(cfg.Rank)%2]
					}
				})
				w := &transporttest.World{}
				for _, tr := range ts {
					w.Ranks = append(w.Ranks, transport.Transport(tr))
				}
				return w
			})
		})
	}
}
