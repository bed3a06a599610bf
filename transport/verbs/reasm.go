package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// fragHeader is the size of a message fragment's header: the message type,
// a last-fragment flag (1 on the last one) and the payload length (uint16,
// little-endian).
const fragHeader = 4

// errFragment is why a peer's stream of fragments is broken.
var errFragment = errors.New("verbs: broken message stream")

// reassembly puts a peer's control message back together from its
// fragments. The fragments of one peer come in order (one reliable queue
// pair), so there is at most one message under way per peer. It is a plain
// value with no lock or goroutine: the caller serializes add and drop.
//
// Its memory is bounded: a message under way holds at most max bytes, and
// drop, called when the peer goes down, frees it and makes later pieces of
// any message in pieces be dropped on arrival. Across the ranks of a job
// the partial messages therefore hold at most max bytes per live peer.
type reassembly struct {
	max     int    // the largest message; a longer one breaks the stream
	buf     []byte // the pieces so far of the message under way
	typ     byte   // its type (its first fragment's)
	started bool   // a message in pieces is under way (kept, or ignored once dropped)
	dropped bool   // the peer is down: keep nothing of messages in pieces
}

// add takes one fragment b (header included). When b completes a message
// it returns the message's type and bytes, ok true; the bytes are b's own
// (valid while b is) for a message of one fragment, or a buffer nobody else
// holds. A fragment shorter than its header says, or a message longer than
// max, fails with an error wrapping errFragment and drops the message under
// way. After drop, fragments of messages in pieces are ignored (ok false);
// a whole message of one fragment still comes out.
func (a *reassembly) add(b []byte) (typ byte, msg []byte, ok bool, err error) {
	if len(b) < fragHeader {
		a.reset()
		return 0, nil, false, fmt.Errorf("%w: a fragment of %d bytes, shorter than its header", errFragment, len(b))
	}
	typ, last, n := b[0], b[1] == 1, int(binary.LittleEndian.Uint16(b[2:]))
	if n > len(b)-fragHeader {
		a.reset()
		return 0, nil, false, fmt.Errorf("%w: a fragment says %d bytes and has %d", errFragment, n, len(b)-fragHeader)
	}
	piece := b[fragHeader : fragHeader+n]
	if a.dropped && (a.started || !last) {
		// Within a message in pieces: ignore it up to its last fragment.
		a.started = !last
		return 0, nil, false, nil
	}
	if !a.started {
		if last {
			if n > a.max {
				return 0, nil, false, fmt.Errorf("%w: a message of %d bytes, max %d", errFragment, n, a.max)
			}
			return typ, piece, true, nil
		}
		a.started, a.typ = true, typ
	}
	if len(a.buf)+n > a.max {
		size := len(a.buf) + n
		a.reset()
		return 0, nil, false, fmt.Errorf("%w: a message of more than %d bytes (%d so far)", errFragment, a.max, size)
	}
	a.buf = append(a.buf, piece...)
	if !last {
		return 0, nil, false, nil
	}
	typ, msg = a.typ, a.buf
	a.reset()
	return typ, msg, true, nil
}

// pending is the number of bytes held for the message under way.
func (a *reassembly) pending() int { return len(a.buf) }

// drop frees the message under way, and from now on ignores fragments of
// messages in pieces (see add).
func (a *reassembly) drop() {
	started := a.started
	a.reset()
	a.started = started // the rest of that message is ignored
	a.dropped = true
}

func (a *reassembly) reset() {
	a.buf, a.typ, a.started = nil, 0, false
}
