package tcp

import (
	"testing"
	"time"

	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/transporttest"
)

// TestContract runs the transport contract (package transporttest) on tcp,
// parked, spinning and spinning politely (polite.go), plain and sealed; a
// killed rank is closed, as the kernel closes a dead process's sockets.
func TestContract(t *testing.T) {
	for _, c := range []struct {
		name   string
		spin   time.Duration
		polite bool
		seal   SealMode
		keyed  bool
	}{{"park", -1, false, SealRemote, false}, {"spin", 0, false, SealRemote, false}, {"polite", 0, true, SealRemote, false},
		{"sealed park", -1, false, SealAll, false}, {"sealed spin", 0, false, SealAll, false}, {"sealed polite", 0, true, SealAll, false},
		{"host keys sealed park", -1, false, SealAll, true}} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.Run(t, func(t testing.TB, n int) *transporttest.World {
				ts, _ := clusterConfig(t, n, func(cfg *Config) {
					cfg.Spin, cfg.Polite, cfg.Seal = c.spin, c.polite, c.seal
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
