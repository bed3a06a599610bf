package store

import (
	"slices"

	"github.com/ftrma/ftrma"
)

// placement decides where a key's copies live: rendezvous (highest random
// weight) hashing over the communicator's ranks. Every rank r gets the score
// mix64(hash ^ φ·(r+1)) for the key; ranks are taken in decreasing score,
// skipping failed ones, first one per host until Copies hosts are used, then
// the remaining ranks in score order until there are Copies. The rule names
// ranks of the communicator the store was opened on and never renumbers
// them, so it needs no agreement and survives failures: when a replica
// fails, only the keys it held get a new replica (the next rank in their
// order), every other key keeps its place.
type placement struct {
	copies int
	host   []int // host index of each rank
	hosts  int
}

func newPlacement(copies int, hostNames []string) *placement {
	p := &placement{copies: copies, host: make([]int, len(hostNames))}
	idx := map[string]int{}
	for r, h := range hostNames {
		i, ok := idx[h]
		if !ok {
			i = len(idx)
			idx[h] = i
		}
		p.host[r] = i
	}
	p.hosts = len(idx)
	return p
}

type scored struct {
	score uint64
	rank  int
}

// order is every rank in the key's preference order.
func (p *placement) order(hash uint64) []scored {
	out := make([]scored, len(p.host))
	for r := range out {
		out[r] = scored{mix64(hash ^ uint64(r+1)*0x9e3779b97f4a7c15), r}
	}
	slices.SortFunc(out, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return a.rank - b.rank
	})
	return out
}

// replicas returns the key's live replicas, best first, given the failed
// ranks; fewer than Copies only when fewer ranks are alive.
func (p *placement) replicas(hash uint64, failed func(ftrma.Rank) bool) []ftrma.Rank {
	ord := p.order(hash)
	out := make([]ftrma.Rank, 0, p.copies)
	if p.hosts > 1 {
		used := make([]bool, p.hosts)
		for _, s := range ord {
			if len(out) == p.copies {
				break
			}
			if !used[p.host[s.rank]] && !failed(ftrma.Rank(s.rank)) {
				used[p.host[s.rank]] = true
				out = append(out, ftrma.Rank(s.rank))
			}
		}
	}
	for _, s := range ord {
		if len(out) == p.copies {
			break
		}
		r := ftrma.Rank(s.rank)
		if !failed(r) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	// Keep score order, so that every rank lists them alike.
	pos := make(map[ftrma.Rank]int, len(ord))
	for i, s := range ord {
		pos[ftrma.Rank(s.rank)] = i
	}
	slices.SortFunc(out, func(a, b ftrma.Rank) int { return pos[a] - pos[b] })
	return out
}

// mayHaveHeld counts the failed ranks among those that held, or could have
// held, the key's copies: the key's order up to its last live replica. When
// there are Copies of them, every copy may be gone.
func (p *placement) mayHaveHeld(hash uint64, failed func(ftrma.Rank) bool) int {
	live, dead := 0, 0
	for _, s := range p.order(hash) {
		if live == p.copies {
			break
		}
		if failed(ftrma.Rank(s.rank)) {
			dead++
		} else {
			live++
		}
	}
	return dead
}
