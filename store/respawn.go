package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/window"
)

// Recovery by respawn, in one call at each side.
//
// After failures, the survivors replace the failed ranks by spares
// (comm.Replace) and grow the store onto the new communicator (Grow); the
// spares join it (Join). Either step can be cut short by a further failure:
// Replace then fails at every survivor with ftrma.ErrProcFailed, and Grow
// fails at every rank, leaving the store on its communicator, with the same
// error. The survivors then replace again — the new failure too — over the
// communicator they have, and the spares that had joined it take part as
// its members. Respawn (survivors) and JoinRespawned (spares) are that
// loop, so that no program writes it out again.

// Respawnable is what Respawn and JoinRespawned need of a communicator:
// a window's, and the replacement of its failed ranks by spares with
// Replace (collective over the survivors; the spares' Init returns the
// same communicator) and Close. *comm.Comm is one.
type Respawnable[C any] interface {
	window.Comm
	Replace(ctx context.Context) (C, error)
	Close() error
}

// Respawn replaces the failed ranks of c by spares and grows s onto the
// result: Replace, then Grow, again over the newest communicator as long
// as a rank fails during them (that rank is replaced too, and the spares
// that joined take part). c is the store's communicator, the one given to
// Open or the last one Respawn returned. Every survivor calls it, at each
// failure it learns of (c.Failed()), so that the calls match; the spares
// call JoinRespawned.
//
// It returns the communicator the store is over now — c itself when no
// rank of c had failed — and the communicator ranks whose processes were
// replaced, in order (a rank replaced twice appears twice). An error
// (Replace's, with the communicator package's error for "no spare left",
// or Grow's) leaves the store on the last communicator returned with it.
//
// The communicators Respawn makes belong to the store: its Close closes
// them, newest first, after freeing its windows over them. Close only
// the communicator given to Open, after the store.
func Respawn[C Respawnable[C]](ctx context.Context, s *Store, c C) (C, []ftrma.Rank, error) {
	if ctx.Err() != nil {
		return c, nil, ctx.Err()
	}
	var replaced []ftrma.Rank
	for {
		nc, err := c.Replace(ctx)
		if retryRespawn(ctx, err) {
			continue // a failure cut the Replace short: again, with it
		}
		if err != nil {
			return c, replaced, fmt.Errorf("replace the failed ranks: %w", err)
		}
		fresh := freshRanks(c, nc)
		if len(fresh) == 0 {
			// Nothing had failed: Replace made a copy of c.
			nc.Close()
			return c, replaced, nil
		}
		s.own(nc)
		err = s.Grow(ctx, nc)
		replaced = append(replaced, fresh...)
		c = nc
		if retryRespawn(ctx, err) {
			// A rank of nc failed during the Grow, which failed at every
			// rank and left the store as it was: replace that one too
			// (nc's spares take part) and grow onto the result.
			continue
		}
		if err != nil {
			return c, replaced, err
		}
		return c, replaced, nil
	}
}

// JoinRespawned is a spare's side of Respawn: Join on c, the communicator
// its startup.Init returned. When a rank of c fails during it, the survivors
// replace that one too and grow again: so does this rank, as a member of
// c, and it joins the result. It returns the store and the communicator it
// joined; the communicators it made belong to the store as Respawn's do
// (close c after the store).
func JoinRespawned[C Respawnable[C]](ctx context.Context, c C, opt Config) (*Store, C, error) {
	var made []C
	first := c
	for {
		s, err := Join(ctx, c, opt)
		if err == nil {
			for _, m := range made {
				s.own(m)
			}
			return s, c, nil
		}
		if !retryRespawn(ctx, err) {
			closeNewestFirst(made)
			return nil, first, err
		}
		nc, err := c.Replace(ctx)
		for retryRespawn(ctx, err) {
			nc, err = c.Replace(ctx)
		}
		if err != nil {
			closeNewestFirst(made)
			return nil, first, fmt.Errorf("replace the failed ranks: %w", err)
		}
		made = append(made, nc)
		c = nc
	}
}

// retryRespawn reports whether err is a failure that cut a Replace, a
// Grow or a Join short, to be recovered from by replacing again.
func retryRespawn(ctx context.Context, err error) bool {
	return errors.Is(err, ftrma.ErrProcFailed) && ctx.Err() == nil
}

// freshRanks returns the ranks of nc whose processes differ from c's: the
// replaced ones.
func freshRanks(c, nc window.Comm) []ftrma.Rank {
	var fresh []ftrma.Rank
	for r := range ftrma.Rank(nc.Size()) {
		if nc.TransportRank(r) != c.TransportRank(r) {
			fresh = append(fresh, r)
		}
	}
	return fresh
}

func closeNewestFirst[C interface{ Close() error }](cs []C) {
	for _, c := range slices.Backward(cs) {
		c.Close()
	}
}

// own makes c the store's to close (Close, after its windows).
func (s *Store) own(c interface{ Close() error }) {
	s.owned.Lock()
	s.owned.cs = append(s.owned.cs, c)
	s.owned.Unlock()
}

// closeOwned closes the communicators the store owns, newest first.
func (s *Store) closeOwned() {
	s.owned.Lock()
	cs := s.owned.cs
	s.owned.cs = nil
	s.owned.Unlock()
	closeNewestFirst(cs)
}
