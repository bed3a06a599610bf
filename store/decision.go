package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/ftrma/ftrma"
)

// Transactions' decisions (DESIGN.md §3.3).
//
// Each rank keeps a decision record under its decision key (txKey), an
// ordinary replicated key that only the rank's current process writes: the
// highest transaction number reserved for the rank's processes, then the
// numbers of the transactions decided whose pending records may still be
// somewhere. A transaction commits when its number goes into the record
// (the Put of the record is its commit point), and it counts committed for
// as long as its number is there: a reader that meets a pending record asks
// whether the record's number is in its writer's record (txCommitted), and
// nothing else. A number leaves the record once its transaction is known
// published at every replica — no pending record of it is left, so nobody
// asks — at the next write of the record.
//
// A number is drawn once, by one process: each process draws from a block
// it reserved in the record first (txBlock at a time), and a process that
// takes a rank over after a failure goes on above the reservation of the
// one before, keeping its open numbers. So an attempt that aborted and left
// a pending record behind (its clearing lost) is never taken for a commit:
// its number is in no record, whatever this rank decides later (F3, F37).

// txKey is the key under which writer keeps its decision record.
func txKey(writer int) []byte { return []byte(reservedPrefix + "tx." + strconv.Itoa(writer)) }

// txTag is the tag of a transaction's records: its number and its writer.
func txTag(seq uint64, writer ftrma.Rank) uint64 { return lockWord(seq, int(writer)) }

// txBlock is how many numbers a process reserves at a time.
const txBlock = 1 << 12

// txNumbers is this process's side of its rank's decision record; the
// Store's decide lock guards it but done, which mu guards.
type txNumbers struct {
	loaded   bool     // known: at Open (there is no record yet), or read from the record before a Joined process's first draw
	last     uint64   // the last number drawn
	reserved uint64   // numbers up to it are this process's to draw
	open     []uint64 // decided, not known published everywhere

	mu   sync.Mutex
	done []uint64 // published everywhere: leave open at the next write
}

// maxOpen bounds the open numbers of a decision record: a Commit that
// would leave more is refused (each is a transaction decided and not yet
// published everywhere: Commits under way, and those a failure cut short).
const maxOpen = 500

// keyLimit is the longest key a reader believes a key block's length for:
// the options' MaxKeySize, or one of the store's own (reserved) keys.
func (o *op) keyLimit() int { return max(o.opt.MaxKeySize, len(reservedPrefix)+32) }

// recordLimit is the longest record a reader believes a slot's length for:
// one of a key and a value within the options, or of the store's own keys
// (a decision record of up to maxOpen numbers), whatever the options.
func (o *op) recordLimit() uint64 {
	return uint64(recordLen(o.keyLimit(), max(o.opt.MaxValueSize, 8*(1+maxOpen))))
}

// encodeDecisions is the decision record: reserved, then the open numbers.
func encodeDecisions(reserved uint64, open []uint64) []byte {
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, 8*(1+len(open))), reserved)
	for _, n := range open {
		b = binary.LittleEndian.AppendUint64(b, n)
	}
	return b
}

// decodeDecisions reads a decision record; ok is false when b is none.
func decodeDecisions(b []byte) (reserved uint64, open []uint64, ok bool) {
	if len(b) < 8 || len(b)%8 != 0 {
		return 0, nil, false
	}
	reserved = binary.LittleEndian.Uint64(b)
	for i := 8; i < len(b); i += 8 {
		open = append(open, binary.LittleEndian.Uint64(b[i:]))
	}
	return reserved, open, true
}

// readDecisions reads rank writer's decision record at every replica
// (getAll: a record its writer wrote in part before it died is settled by
// the first reader, so that every reader concludes the same, F35); a rank
// that never wrote one has none (0, nil).
func (o *op) readDecisions(ctx context.Context, writer int) (reserved uint64, open []uint64, err error) {
	v, _, err := o.getAll(ctx, o.ident(txKey(writer)))
	if errors.Is(err, ErrNotFound) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	reserved, open, ok := decodeDecisions(v)
	if !ok {
		return 0, nil, fmt.Errorf("%w: rank %d's decision record is %d bytes", ErrDataLost, writer, len(v))
	}
	return reserved, open, nil
}

// txCommitted reports whether the transaction tagged tag committed: whether
// its number is in its writer's decision record. The record is read at
// every replica, never by a fast read: a fast read at a primary that a
// decision had not reached answered "not committed" while a later full
// read repaired the decision in (F35).
func (s *Store) txCommitted(ctx context.Context, tag uint64) (bool, error) {
	writer, seq := lockOwner(tag), lockVersion(tag)
	if writer < 0 {
		return true, nil // not a transaction
	}
	var open []uint64
	err := s.inView(func(o *op) (err error) {
		_, open, err = o.readDecisions(ctx, writer)
		return err
	})
	if err != nil {
		return false, err
	}
	return slices.Contains(open, seq), nil
}

// drawTx returns a number for a transaction's attempt, drawn by this
// process alone: the first draw of a process that took the rank over
// (Join) reads the rank's record and goes on above its predecessor's
// reservation, keeping its open numbers; a draw past the reservation
// reserves the next block first.
func (o *op) drawTx(ctx context.Context) (uint64, error) {
	if err := o.decide.lock(ctx); err != nil {
		return 0, err
	}
	defer o.decide.unlock()
	t := &o.tx
	if !t.loaded {
		reserved, open, err := o.readDecisions(ctx, int(o.me))
		if err != nil {
			return 0, err
		}
		t.loaded, t.last, t.reserved, t.open = true, reserved, reserved, open
	}
	if t.last == t.reserved {
		if t.reserved+txBlock > maxVersion {
			return 0, fmt.Errorf("%w: rank %d drew every transaction number", ftrma.ErrInvalid, o.me)
		}
		// The reservation counts once written; one that failed but landed
		// only skips numbers.
		if err := o.writeDecisions(ctx, t.reserved+txBlock); err != nil {
			return 0, err
		}
		t.reserved += txBlock
	}
	t.last++
	return t.last, nil
}

// writeDecisions writes this rank's decision record with reservation
// reserved and the open numbers, leaving out those published everywhere.
// The caller holds decide.
func (o *op) writeDecisions(ctx context.Context, reserved uint64) error {
	o.tx.prune()
	return o.write(ctx, o.ident(txKey(int(o.me))), encodeDecisions(reserved, o.tx.open), false)
}

// prune drops from open the numbers published everywhere since. The
// caller holds decide.
func (t *txNumbers) prune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open = slices.DeleteFunc(t.open, func(n uint64) bool { return slices.Contains(t.done, n) })
	t.done = t.done[:0]
}

// errUndecided: the decision write failed and its outcome could not be
// read either; the transaction's locks stay held, and its fate is decided
// when this rank fails.
var errUndecided = errors.New("transaction decision unknown")

// decideTx is the commit point: it puts the transaction's number seq into
// this rank's decision record. When the write fails, the record (which a
// read makes consistent) says whether it landed: nil if so, the write's
// error if not (the attempt aborts), or an error wrapping errUndecided
// with the reading's when even that fails.
func (o *op) decideTx(ctx context.Context, seq, tag uint64) error {
	if err := o.decide.lock(ctx); err != nil {
		return err
	}
	defer o.decide.unlock()
	t := &o.tx
	t.prune()
	if len(t.open) >= maxOpen {
		return fmt.Errorf("%w: %d transactions of rank %d are decided and not yet published everywhere", ErrFull, len(t.open), o.me)
	}
	t.open = append(t.open, seq)
	err := o.writeDecisions(ctx, t.reserved)
	if err == nil {
		return nil
	}
	committed, err2 := o.txCommitted(ctx, tag)
	switch {
	case err2 != nil:
		return fmt.Errorf("%w: %w", errUndecided, err2)
	case committed:
		return nil
	}
	t.open = slices.DeleteFunc(t.open, func(n uint64) bool { return n == seq })
	return err
}

// publishedTx records that transaction seq is published at every replica
// of its keys: no pending record of it is left, so its number leaves the
// record at the record's next write.
func (o *op) publishedTx(seq uint64) {
	o.tx.mu.Lock()
	o.tx.done = append(o.tx.done, seq)
	o.tx.mu.Unlock()
}
