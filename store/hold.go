package store

import (
	"fmt"
	"time"

	"github.com/ftrma/ftrma"
)

// No wait on a live holder without a bound.
//
// A writer meets a key's lock (lockAll), a reader a key being written
// (getAll), a claimer a rank's claim lock (lockClaims) held by a live rank,
// and waits for it to let go. A failed holder's word is taken over once the
// failure is known; a live one lets go within holdBound of taking it: an
// operation holds a lock for a few round trips, each bounded by the
// runtime's verdict bound; a lease ends when asked, within a housekeeping
// tick; a commit finishes what follows its decision within commitBound. A
// waiter that meets the very same words (same holders, same versions) for
// longer than that gives up with an error wrapping ftrma.ErrLockHeld: the
// holder is broken, and the caller learns so whatever its context.

// commitBound is how long a Commit goes on after its decision, whatever its
// caller's context (tx.go).
const commitBound = time.Minute

// holdBound is how long a live rank may hold what a waiter waits for.
func (s *Store) holdBound() time.Duration {
	if s.holdFor > 0 {
		return s.holdFor
	}
	return commitBound + 3*s.verdict
}

// holdWatch follows what one wait meets: the words held, summed into a
// fingerprint, and since when the same ones.
type holdWatch struct {
	bound time.Duration
	words uint64
	since time.Time
}

func (o *op) holdWatch() *holdWatch { return &holdWatch{bound: o.holdBound()} }

// met records the words a wait met this time (what, holder: for the
// error); it returns an error once the same words were met for longer than
// the bound.
func (h *holdWatch) met(words uint64, what string, holder ftrma.Rank) error {
	now := time.Now()
	if h.since.IsZero() || words != h.words {
		h.words, h.since = words, now
		return nil
	}
	if d := now.Sub(h.since); d > h.bound {
		return fmt.Errorf("%w: %s held by live rank %d, unchanged for %v (a live rank lets go within %v)", ftrma.ErrLockHeld, what, holder, d.Round(time.Millisecond), h.bound)
	}
	return nil
}

// fingerprint mixes word w into sum.
func fingerprint(sum, w uint64) uint64 { return (sum ^ w) * 0x100000001b3 }
