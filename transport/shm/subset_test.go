//go:build linux

package shm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// hostsOf gives ranks of one parity the same host: {0, 2} and {1, 3}.
func hostsOf(c *Config) {
	if c.Rank%2 == 0 {
		c.Ranks = []ftrma.Rank{2, 0}
	} else {
		c.Ranks = []ftrma.Rank{1, 3}
	}
}

// A transport opened for a subset of the job's ranks (those of its host)
// connects those only, even with other hosts' ranks in the same directory:
// it reaches them, refuses the others with ftrma.ErrInvalid and never maps
// them, and its control segment holds lines and rings for its subset only.
func TestSubsetOfRanks(t *testing.T) {
	dir := t.TempDir()
	ts, rs, _ := cluster(t, 4, clusterOpts{dir: dir, cfg: hostsOf})
	ctx := testCtx(t)
	keys := make([]transport.Key, 4)
	for r, tr := range ts {
		keys[r] = must(tr.Register(must(tr.Alloc(64))))
	}
	for me, tr := range ts {
		for r := range ftrma.Rank(4) {
			served := int(r)%2 == me%2
			if tr.Serves(r) != served {
				t.Errorf("rank %d: Serves(%d) = %v", me, r, !served)
			}
			_, werr := tr.FetchAndAdd64(r, keys[r], 0, 1, nil)
			serr := tr.Send(r, []byte("hello"))
			if served {
				if werr != nil || serr != nil || tr.Flush(ctx, r) != nil {
					t.Errorf("rank %d toward %d: %v, %v", me, r, werr, serr)
				}
				continue
			}
			for what, err := range map[string]error{"fetch-and-add": werr, "send": serr, "flush": tr.Flush(ctx, r), "fence": tr.Fence(r)} {
				if !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), "not served") {
					t.Errorf("rank %d: %s toward rank %d of another host: %v", me, what, r, err)
				}
			}
			tr.PeerDown(r, errors.New("ignored")) // does nothing
			if tr.peers[r] != nil {
				t.Errorf("rank %d has a peer for rank %d", me, r)
			}
		}
	}
	for me, rec := range rs {
		for _, r := range []ftrma.Rank{ftrma.Rank(me % 2), ftrma.Rank(me%2 + 2)} {
			rec.Await(t, ctx, "hello", func() bool { return len(rec.From(r)) == 1 })
		}
	}
	st, err := os.Stat(filepath.Join(dir, ctlName("t", 0)))
	if err != nil {
		t.Fatal(err)
	}
	if want := makeLayout(2, defaultRingBytes, defaultRegions).total; st.Size() != int64(want) {
		t.Errorf("control segment of %d bytes, want %d (two rings)", st.Size(), want)
	}
	// A rank that closes is reported to its host's ranks only.
	ts[2].Close()
	rs[0].Await(t, ctx, "rank 2 down", func() bool { return len(rs[0].DownsOf(2)) == 1 })
	for _, r := range []int{1, 3} {
		if d := rs[r].DownsOf(2); len(d) != 0 {
			t.Errorf("rank %d on another host heard of rank 2: %v", r, d)
		}
	}
}

// Ranks given different lists refuse each other at Connect instead of
// misreading each other's rings.
func TestSubsetsMustAgree(t *testing.T) {
	dir := t.TempDir()
	a := must(Open(Config{Rank: 0, Size: 3, Job: "t", Dir: dir, Ranks: []ftrma.Rank{0, 1}}))
	defer a.Close()
	b := must(Open(Config{Rank: 1, Size: 3, Job: "t", Dir: dir, Ranks: []ftrma.Rank{0, 1, 2}}))
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tr := range []*Transport{a, b} {
		if err := tr.Connect(ctx); !errors.Is(err, ftrma.ErrInvalid) || !strings.Contains(err.Error(), "different Config.Ranks") {
			t.Errorf("rank %d: connect: %v", tr.Rank(), err)
		}
	}
}

func TestSubsetConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		ranks []ftrma.Rank
		want  error
	}{
		{[]ftrma.Rank{1, 2}, ftrma.ErrInvalid},        // not this rank
		{[]ftrma.Rank{0, 2, 2}, ftrma.ErrInvalid},     // twice
		{[]ftrma.Rank{0, 3}, ftrma.ErrRankOutOfRange}, // beyond Size
		{[]ftrma.Rank{-1, 0}, ftrma.ErrRankOutOfRange},
		{[]ftrma.Rank{}, ftrma.ErrInvalid}, // empty, not nil: this rank is missing
	} {
		if tr, err := Open(Config{Rank: 0, Size: 3, Job: "t", Dir: dir, Ranks: c.ranks}); !errors.Is(err, c.want) {
			t.Errorf("Ranks %v: %v, want %v", c.ranks, err, c.want)
			if tr != nil {
				tr.Close()
			}
		}
	}
	// The caller's slice is neither kept nor reordered.
	ranks := []ftrma.Rank{2, 0}
	tr := must(Open(Config{Rank: 0, Size: 3, Job: "t", Dir: dir, Ranks: ranks}))
	defer tr.Close()
	if ranks[0] != 2 || !tr.Serves(2) || tr.Serves(1) {
		t.Errorf("ranks %v, Serves(2) %v, Serves(1) %v", ranks, tr.Serves(2), tr.Serves(1))
	}
}
