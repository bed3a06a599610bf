package store

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// FuzzParseSurvivor: a survivor's part of a Grow exchange comes from
// another rank. parseSurvivor never panics, whatever the bytes and the
// world's size.
func FuzzParseSurvivor(f *testing.F) {
	f.Add([]byte{0}, 4)
	f.Add(append([]byte{1}, []byte(growMagic)...), 8)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		parseSurvivor(b, max(1, n%4096))
	})
}

// fuzzComm is the little of a communicator parseGrow asks: its size and
// which transport rank each of its ranks is now.
type fuzzComm struct {
	window.Comm
	world []ftrma.Rank
}

func (c fuzzComm) Size() int                             { return len(c.world) }
func (c fuzzComm) TransportRank(r ftrma.Rank) ftrma.Rank { return c.world[r] }

// FuzzParseGrow: both rounds of a Grow exchange come from other ranks.
// parseGrow never panics, whatever they hold and however many parts each
// round has, and what it accepts is consistent: a host and a table for
// every rank.
func FuzzParseGrow(f *testing.F) {
	survivor := func(world []ftrma.Rank, hosts []string) []byte {
		b := append([]byte{'S'}, growMagic...)
		for range 10 {
			b = binary.LittleEndian.AppendUint64(b, 7)
		}
		for r := range world {
			b = binary.LittleEndian.AppendUint32(b, uint32(world[r]))
			b = binary.LittleEndian.AppendUint32(b, uint32(len(hosts[r])))
			b = append(b, hosts[r]...)
		}
		return b
	}
	sep := []byte{0xff, 0xfe}
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, sep) }
	old := []ftrma.Rank{0, 1, 2}
	s := survivor(old, []string{"h1", "h2", "h3"})
	f.Add(uint8(0), join(s, s, []byte("Jh4")), join([]byte{'S'}, []byte{'S'}, binary.LittleEndian.AppendUint64([]byte{'J'}, 9)))
	f.Add(uint8(1), join(s, s), join([]byte{'S'}))
	f.Fuzz(func(t *testing.T, replaced uint8, first, second []byte) {
		r1, r2 := bytes.Split(first, sep), bytes.Split(second, sep)
		world := make([]ftrma.Rank, len(r1))
		for r := range world {
			world[r] = ftrma.Rank(r)
			if int(replaced) == r {
				world[r] = ftrma.Rank(100 + r) // a new process
			}
		}
		g, err := parseGrow(fuzzComm{world: world}, r1, r2)
		if err != nil {
			return
		}
		if len(g.hosts) != len(world) || len(g.tables) != len(world) || len(g.replaced) != len(world) {
			t.Fatalf("accepted a Grow of %d ranks with %d hosts, %d tables", len(world), len(g.hosts), len(g.tables))
		}
	})
}
