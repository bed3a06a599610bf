package launcher

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/transport"
)

// spawnXferHelper is the rank program of TestRespawnTransport: a job of 2
// ranks and 1 spare. Rank 0 asks for the spare; ranks 0 and 1 wait until
// they have admitted it (OnAdmit). Then the three exchange their memory
// keys by message, each Writes its rank+1 into its slot of every other
// one's memory, flushes, and says "done"; a message comes after the
// operations posted before it, so on every peer's "done" its Write has
// landed, and each checks its memory. A bye round ends it.
func spawnXferHelper(rank int) int {
	ctx, cancel := context.WithTimeout(context.Background(), helperLife)
	defer cancel()
	size, _ := strconv.Atoi(os.Getenv(jobwire.EnvSize))
	recv := newChanReceiver(size)
	s, err := startup.Join(ctx, recv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", rank, err)
		return 1
	}
	defer s.Close()
	t := s.Transport()
	defer t.Close()
	admits := make(chan ftrma.Rank, 4)
	s.OnAdmit(func(r ftrma.Rank, _ string, _ []byte) { admits <- r })
	payload, spawned := s.Spawned()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "rank %d: %s\n", rank, fmt.Sprintf(format, args...))
		return 1
	}
	if spawned != (rank == 2) {
		return fail("Spawned %v", spawned)
	}
	if spawned {
		fmt.Printf("rank %d spawned with %s, failed at join %v, live %v\n", rank, payload, s.FailedAtJoin(), s.LiveAtJoin())
	} else {
		if rank == 0 {
			ranks, err := s.Spawn(ctx, 1, []byte("p"))
			if err != nil || len(ranks) != 1 || ranks[0] != 2 {
				return fail("spawn: %v %v", ranks, err)
			}
		}
		select {
		case r := <-admits:
			if r != 2 {
				return fail("admitted %d", r)
			}
		case <-ctx.Done():
			return fail("no admission")
		}
	}
	peers := []ftrma.Rank{}
	for p := range ftrma.Rank(3) {
		if int(p) != rank {
			peers = append(peers, p)
		}
	}
	x := &xfer{ctx: ctx, t: t, recv: recv, peers: peers}
	if err := x.exchangeWrites(rank, size); err != nil {
		return fail("%v", err)
	}
	fmt.Printf("rank %d of %d exchanged messages and writes with ranks %v\n", rank, t.Size(), peers)
	if err := x.sendAll("bye"); err != nil {
		return fail("%v", err)
	}
	if _, err := x.got("bye", true); err != nil {
		return fail("%v", err)
	}
	return 0
}

// xfer is one rank's side of the exchanges of the spare transport tests,
// over a transport joined with startup.Join and its chanReceiver.
type xfer struct {
	ctx   context.Context
	t     transport.Transport
	recv  *chanReceiver
	peers []ftrma.Rank
	// mayDie are peers whose going down is noted in down rather than an
	// error (outside the bye round).
	mayDie []ftrma.Rank
	down   []ftrma.Rank
	kept   []received // messages for a later got
}

func (x *xfer) sendAll(msg string) error {
	for _, p := range x.peers {
		if err := x.t.Send(p, []byte(msg)); err != nil {
			return fmt.Errorf("send %q to %d: %w", msg, p, err)
		}
	}
	return nil
}

// got waits for a message starting with word from every peer (what
// follows word, by peer), and keeps the others for later. In the bye
// round a peer that goes down counts as having answered.
func (x *xfer) got(word string, byeRound bool) (map[ftrma.Rank]string, error) {
	out := make(map[ftrma.Rank]string)
	take := func(m received) {
		if rest, ok := strings.CutPrefix(m.msg, word); ok {
			out[m.from] = rest
		} else {
			x.kept = append(x.kept, m)
		}
	}
	old := x.kept
	x.kept = nil
	for _, m := range old {
		take(m)
	}
	for len(out) < len(x.peers) {
		select {
		case m := <-x.recv.msgs:
			take(m)
		case p := <-x.recv.down:
			switch {
			case byeRound:
				out[p] = ""
			case slices.Contains(x.mayDie, p):
				x.down = append(x.down, p)
			default:
				return nil, fmt.Errorf("rank %d went down", p)
			}
		case <-x.ctx.Done():
			return nil, fmt.Errorf("waiting for %q: %v", word, x.ctx.Err())
		}
	}
	return out, nil
}

// exchangeWrites registers 8 bytes a rank of a job of size, exchanges the
// memory keys by message, Writes rank+1 into this rank's slot of every
// peer's memory, flushes, and says "done"; a message comes after the
// operations posted before it, so on every peer's "done" its Write has
// landed, and it checks its memory.
func (x *xfer) exchangeWrites(rank, size int) error {
	mem := make([]byte, 8*size)
	if a, ok := x.t.(transport.Allocator); ok {
		var err error
		if mem, err = a.Alloc(8 * size); err != nil {
			return fmt.Errorf("alloc: %w", err)
		}
	}
	key, err := x.t.Register(mem)
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if err := x.sendAll(fmt.Sprintf("key %d", key)); err != nil {
		return err
	}
	keys, err := x.got("key ", false)
	if err != nil {
		return err
	}
	for _, p := range x.peers {
		k, err := strconv.ParseUint(keys[p], 10, 32)
		if err != nil {
			return fmt.Errorf("key of %d: %q", p, keys[p])
		}
		var v [8]byte
		binary.LittleEndian.PutUint64(v[:], uint64(rank+1))
		if _, err := x.t.Write(p, transport.Key(k), uint64(8*rank), v[:]); err != nil {
			return fmt.Errorf("write to %d: %w", p, err)
		}
		if err := x.t.Flush(x.ctx, p); err != nil {
			return fmt.Errorf("flush to %d: %w", p, err)
		}
	}
	if err := x.sendAll("done"); err != nil {
		return err
	}
	if _, err := x.got("done", false); err != nil {
		return err
	}
	for _, p := range x.peers {
		if v := binary.LittleEndian.Uint64(mem[8*p:]); v != uint64(p+1) {
			return fmt.Errorf("slot of %d holds %d, want %d", p, v, p+1)
		}
	}
	return nil
}

// A spare started at a rank's request joins the transport of the ranks
// started at launch: over TCP and over shared memory, every live rank and
// the spare exchange messages and Writes, and the spare saw the job's
// full size and its payload.
func TestRespawnTransport(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			cmd := helperCmd(t, ctx, "spawnxfer", []string{"-n", "2", "--respawn=1", "--transport", tr})
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("ftrun: %v\n%s", err, out)
			}
			wantLines(t, string(out),
				`rank 2 spawned with p, failed at join \[\], live \[0 1\]`,
				`rank 0 of 3 exchanged messages and writes with ranks \[1 2\]`,
				`rank 1 of 3 exchanged messages and writes with ranks \[0 2\]`,
				`rank 2 of 3 exchanged messages and writes with ranks \[0 1\]`,
			)
		})
	}
}
