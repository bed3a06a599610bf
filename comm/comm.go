package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/launcher"
	"github.com/ftrma/ftrma/transport"
)

// Message kinds on the transport's control path. Append-only.
const (
	kindColl byte = 1 // a collective's contribution: ctx u32, seq u64, payload
)

const collHeader = 1 + 4 + 8

// MaxCollectivePayload is the largest contribution of one rank to a collective.
const MaxCollectivePayload = transport.MaxControlMessage - collHeader

// Comm is a communicator: this rank's view of a group of ranks over one
// transport. All methods may be called from any goroutine, but collectives on
// one communicator are called one at a time, in the same order on every rank.
type Comm struct {
	t       transport.Transport
	rank    ftrma.Rank
	size    int
	ctxID   uint32
	session io.Closer // the launcher session, closed by Finalize; may be nil

	mu     sync.Mutex           // guards the fields below
	inbox  map[collKey][]byte   // contributions received, not yet consumed
	failed map[ftrma.Rank]error // ranks whose connection was lost
	seq    uint64               // collectives started on this communicator
	wake   chan struct{}        // closed and replaced when inbox or failed change
	closed bool
}

type collKey struct {
	ctx  uint32
	seq  uint64
	from ftrma.Rank
}

// Init joins the job this process was started in by ftrun and returns the
// world communicator. It fails with a clear error when the process was not
// started by ftrun.
func Init(ctx context.Context) (*Comm, error) {
	c := newComm()
	s, err := launcher.Join(ctx, c)
	if err != nil {
		return nil, err
	}
	c.attach(s.Transport())
	c.session = s
	return c, nil
}

// New builds the world communicator over a connected transport and installs
// itself as the transport's receiver. Tests use it with memnet endpoints.
func New(t transport.Transport) *Comm {
	c := newComm()
	c.attach(t)
	t.SetReceiver(c)
	return c
}

func newComm() *Comm {
	return &Comm{
		inbox:  make(map[collKey][]byte),
		failed: make(map[ftrma.Rank]error),
		wake:   make(chan struct{}),
	}
}

// attach binds the communicator to its transport, before any use.
func (c *Comm) attach(t transport.Transport) {
	c.t, c.rank, c.size = t, t.Rank(), t.Size()
}

// Rank returns this process's rank in the communicator.
func (c *Comm) Rank() ftrma.Rank { return c.rank }

// Size returns the number of ranks in the communicator.
func (c *Comm) Size() int { return c.size }

// Transport returns the transport the communicator runs on.
func (c *Comm) Transport() transport.Transport { return c.t }

// HandleMessage implements transport.Receiver; it is called by the transport.
func (c *Comm) HandleMessage(from ftrma.Rank, msg []byte) {
	if len(msg) < collHeader || msg[0] != kindColl {
		return // not ours or malformed: nothing to deliver
	}
	k := collKey{ctx: binary.BigEndian.Uint32(msg[1:]), seq: binary.BigEndian.Uint64(msg[5:]), from: from}
	payload := append([]byte(nil), msg[collHeader:]...)
	c.mu.Lock()
	c.inbox[k] = payload
	c.signalLocked()
	c.mu.Unlock()
}

// HandlePeerDown implements transport.Receiver; it is called by the transport.
func (c *Comm) HandlePeerDown(peer ftrma.Rank, err error) {
	c.mu.Lock()
	if c.failed[peer] == nil {
		c.failed[peer] = err
	}
	c.signalLocked()
	c.mu.Unlock()
}

func (c *Comm) signalLocked() {
	close(c.wake)
	c.wake = make(chan struct{})
}

// Failed reports the ranks whose connection has been lost, in rank order.
func (c *Comm) Failed() []ftrma.Rank {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ftrma.Rank
	for r := range c.size {
		if c.failed[ftrma.Rank(r)] != nil {
			out = append(out, ftrma.Rank(r))
		}
	}
	return out
}

// begin starts the next collective and returns its sequence number.
func (c *Comm) begin(op string) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, &ftrma.OpError{Op: op, Rank: -1, Err: ftrma.ErrClosed}
	}
	c.seq++
	return c.seq, nil
}

func (c *Comm) send(op string, to ftrma.Rank, seq uint64, payload []byte) error {
	msg := make([]byte, collHeader, collHeader+len(payload))
	msg[0] = kindColl
	binary.BigEndian.PutUint32(msg[1:], c.ctxID)
	binary.BigEndian.PutUint64(msg[5:], seq)
	msg = append(msg, payload...)
	if err := c.t.Send(to, msg); err != nil {
		return &ftrma.OpError{Op: op, Rank: to, Err: err}
	}
	return nil
}

// await waits for the contributions of seq from every rank in from, and
// returns them indexed like from.
func (c *Comm) await(ctx context.Context, op string, seq uint64, from []ftrma.Rank) ([][]byte, error) {
	out := make([][]byte, len(from))
	got := 0
	for {
		c.mu.Lock()
		for i, r := range from {
			k := collKey{c.ctxID, seq, r}
			if p, ok := c.inbox[k]; ok && out[i] == nil {
				out[i] = p
				if p == nil {
					out[i] = []byte{}
				}
				delete(c.inbox, k)
				got++
			}
		}
		if got == len(from) {
			c.mu.Unlock()
			return out, nil
		}
		for i, r := range from {
			if out[i] == nil && c.failed[r] != nil {
				err := c.failed[r]
				c.mu.Unlock()
				return nil, &ftrma.OpError{Op: op, Rank: r, Err: err}
			}
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, &ftrma.OpError{Op: op, Rank: -1, Err: ctx.Err()}
		}
	}
}

// others returns every rank but this one.
func (c *Comm) others() []ftrma.Rank {
	out := make([]ftrma.Rank, 0, c.size-1)
	for r := range c.size {
		if ftrma.Rank(r) != c.rank {
			out = append(out, ftrma.Rank(r))
		}
	}
	return out
}

// Allgather gives every rank's contribution to every rank: the result is
// indexed by rank and holds mine at this rank's index. mine may be at most
// MaxCollectivePayload bytes. It fails with an error wrapping
// ftrma.ErrProcFailed if a rank is lost before its contribution arrives, or
// with ctx's error.
func (c *Comm) Allgather(ctx context.Context, mine []byte) ([][]byte, error) {
	if len(mine) > MaxCollectivePayload {
		return nil, &ftrma.OpError{Op: "allgather", Rank: -1, Err: fmt.Errorf("%w: contribution of %d bytes exceeds %d", ftrma.ErrInvalid, len(mine), MaxCollectivePayload)}
	}
	seq, err := c.begin("allgather")
	if err != nil {
		return nil, err
	}
	others := c.others()
	for _, r := range others {
		if err := c.send("allgather", r, seq, mine); err != nil {
			return nil, err
		}
	}
	got, err := c.await(ctx, "allgather", seq, others)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, c.size)
	out[c.rank] = append([]byte{}, mine...)
	for i, r := range others {
		out[r] = got[i]
	}
	return out, nil
}

// Barrier returns when every rank has entered it, or with the errors of
// Allgather.
func (c *Comm) Barrier(ctx context.Context) error {
	_, err := c.Allgather(ctx, nil)
	if err != nil {
		err.(*ftrma.OpError).Op = "barrier"
	}
	return err
}

// Bcast returns root's data on every rank (data is ignored elsewhere). data may
// be at most MaxCollectivePayload bytes.
func (c *Comm) Bcast(ctx context.Context, root ftrma.Rank, data []byte) ([]byte, error) {
	if root < 0 || int(root) >= c.size {
		return nil, &ftrma.OpError{Op: "bcast", Rank: root, Err: ftrma.ErrRankOutOfRange}
	}
	if c.rank == root && len(data) > MaxCollectivePayload {
		return nil, &ftrma.OpError{Op: "bcast", Rank: root, Err: fmt.Errorf("%w: %d bytes exceeds %d", ftrma.ErrInvalid, len(data), MaxCollectivePayload)}
	}
	seq, err := c.begin("bcast")
	if err != nil {
		return nil, err
	}
	if c.rank == root {
		for _, r := range c.others() {
			if err := c.send("bcast", r, seq, data); err != nil {
				return nil, err
			}
		}
		return append([]byte{}, data...), nil
	}
	got, err := c.await(ctx, "bcast", seq, []ftrma.Rank{root})
	if err != nil {
		return nil, err
	}
	return got[0], nil
}

// Finalize waits for every rank in a barrier, then closes the transport and
// the launcher session. The communicator cannot be used afterwards. If the
// barrier fails the transport is closed all the same and the error returned.
func (c *Comm) Finalize(ctx context.Context) error {
	err := c.Barrier(ctx)
	return joinErr(err, c.Close())
}

// Close closes the transport and the launcher session without waiting for
// other ranks.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	err := c.t.Close()
	if c.session != nil {
		err = joinErr(err, c.session.Close())
	}
	return err
}

func joinErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
