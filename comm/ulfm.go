package comm

import (
	"context"

	"github.com/ftrma/ftrma"
)

// This file holds the ULFM calls of MPI 5 (and mpi4py) beyond the blocking
// ones of comm.go: the failed group and its acknowledgement, departures,
// and the non-blocking agreement and shrink.

// GetFailed returns the communicator ranks known to have failed, in the
// order this process learned of them (MPI_Comm_get_failed). The order only
// grows at the end, so a later call returns an extension of an earlier
// one. Ranks that left cleanly are not in it (see Departed). Local: no
// communication.
func (c *Comm) GetFailed() []ftrma.Rank {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	var out []ftrma.Rank
	for _, w := range c.rt.order {
		if i := c.index[w]; i >= 0 {
			out = append(out, i)
		}
	}
	return out
}

// AckFailed acknowledges the first n failures of GetFailed
// (MPI_Comm_ack_failed) and returns how many failures of the communicator
// are acknowledged now: the acknowledged ones are the first that many
// ranks of GetFailed. Agree reports no acknowledged failure with
// ErrProcFailed. Acknowledgements only grow: AckFailed(0) acknowledges
// nothing new and returns the count, and a negative n counts as 0.
// AckFailed(c.Size()) acknowledges every failure known now. Local: no
// communication.
func (c *Comm) AckFailed(n int) int {
	known := len(c.GetFailed())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nacked = max(c.nacked, min(n, known))
	return c.nacked
}

// Departed returns the communicator ranks known to have left cleanly (they
// closed their world communicator, with Close or Finalize), in rank order.
// A departure is not a failure: these ranks are in neither Failed nor
// GetFailed; ProcFailed is true for them, as for failed ranks (gone either way). A rank this process learned
// failed before it learned of its departure stays failed (a rank that
// closes during an agreement may be agreed failed by ranks that had not yet
// seen it leave). Operations that need a departed rank fail with an error
// wrapping both ftrma.ErrProcFailed (the rank takes part in nothing any
// more) and transport.ErrPeerLeft, which tells a departure apart. Agree
// and Shrink do not wait for departed ranks, and Shrink leaves them out.
// Local: no communication.
func (c *Comm) Departed() []ftrma.Rank {
	return c.membersIn(func(rt *runtime) []bool { return rt.departed })
}

// hasDeparted reports whether communicator rank r is known to have left.
func (c *Comm) hasDeparted(r ftrma.Rank) bool {
	if r < 0 || int(r) >= len(c.members) {
		return false
	}
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	return c.rt.departed[c.members[r]]
}

// AgreeRequest is an agreement under way, started by Iagree.
type AgreeRequest struct {
	done  chan struct{} // closed once value and err are set
	value uint64
	err   error
}

// Iagree starts the agreement of Agree and returns at once
// (MPI_Comm_iagree). It counts as a collective call at the time of Iagree:
// agreements (Agree, Iagree, Shrink, Ishrink) on one communicator are
// started in the same order on every rank. The request completes when
// every surviving rank has contributed, with Agree's value and error
// (ErrProcFailed for an agreed failure not acknowledged by the time it
// completes). It blocks only while this rank's lease from ftrun is being
// rescued, as every collective does (a quarter lease term at most). A
// request on a communicator closed before it completes ends with an error
// wrapping ftrma.ErrClosed.
func (c *Comm) Iagree(flag uint64) *AgreeRequest {
	r := &AgreeRequest{done: make(chan struct{})}
	inst, err := c.startAgree(context.Background(), flag)
	if err != nil {
		r.err = err
		close(r.done)
		return r
	}
	go func() {
		r.value, r.err = c.agreed(c.awaitDecision(context.Background(), inst))
		close(r.done)
	}()
	return r
}

// Done returns a channel closed when the agreement completes.
func (r *AgreeRequest) Done() <-chan struct{} { return r.done }

// Test reports whether the agreement has completed (MPI_Test); Wait then
// returns its result at once.
func (r *AgreeRequest) Test() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Wait waits for the agreement and returns Agree's value and error, or
// ctx's error if ctx ends first: the agreement goes on, and Wait may be
// called again.
func (r *AgreeRequest) Wait(ctx context.Context) (uint64, error) {
	select {
	case <-r.done:
		return r.value, r.err
	case <-ctx.Done():
		return 0, &ftrma.OpError{Op: "iagree", Rank: -1, Err: ctx.Err()}
	}
}

// ShrinkRequest is a shrink under way, started by Ishrink.
type ShrinkRequest struct {
	done chan struct{} // closed once comm and err are set
	comm *Comm
	err  error
}

// Ishrink starts Shrink and returns at once (MPI_Comm_ishrink): the
// request's Wait gives the new communicator. It is ordered as Iagree is
// and blocks as little. Start no other agreement (Agree, Iagree, Shrink,
// Ishrink, Dup, Split) on the same communicator until it completes: when
// every candidate context id of its vote is taken somewhere, it agrees
// again on further candidates, and those agreements must not interleave
// with others.
func (c *Comm) Ishrink() *ShrinkRequest {
	r := &ShrinkRequest{done: make(chan struct{})}
	ctx := context.Background()
	inst, reserved, err := c.startChild(ctx, "ishrink", "shrink", []int64{0}, statusBits)
	if err != nil {
		r.err = err
		close(r.done)
		return r
	}
	go func() {
		d, ids, reserved, err := c.finishChild(ctx, "ishrink", "shrink", []int64{0}, inst, reserved)
		if err != nil {
			r.err = err
		} else {
			r.comm, r.err = c.shrunk(d, ids, reserved)
		}
		close(r.done)
	}()
	return r
}

// Done returns a channel closed when the shrink completes.
func (r *ShrinkRequest) Done() <-chan struct{} { return r.done }

// Test reports whether the shrink has completed; Wait then returns at once.
func (r *ShrinkRequest) Test() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Wait waits for the shrink and returns the new communicator, Shrink's
// error, or ctx's error if ctx ends first: the shrink goes on, and Wait
// may be called again.
func (r *ShrinkRequest) Wait(ctx context.Context) (*Comm, error) {
	select {
	case <-r.done:
		return r.comm, r.err
	case <-ctx.Done():
		return nil, &ftrma.OpError{Op: "ishrink", Rank: -1, Err: ctx.Err()}
	}
}
