package revoke

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// Message is one broadcast: an ID chosen by its originator, which names the
// broadcast job-wide ("fail/3", "revoke/ctx7"), and an opaque payload. Two
// originators that broadcast the same ID broadcast the same thing: every
// rank delivers the first copy it receives and drops the others.
type Message struct {
	ID      string
	Payload []byte
	// tree is 1 + the root of the binomial tree this copy travels down, or
	// 0 for a flood copy (see the package documentation). The Broadcast
	// sets it on the copies it sends; the caller's Message is a flood copy
	// until Originate picks the way.
	tree int
}

// Flood reports whether m is a flood copy (the caller may then leave out
// its own flood copy to the rank m came from; see the caller's duty 5).
func (m Message) Flood() bool { return m.tree == 0 }

// AppendBinary appends the encoding of m to b and returns the extended
// slice: uvarint(len(ID)), ID, uvarint(len(Payload)), Payload, uvarint(1 +
// the tree's root, or 0 for a flood copy).
func (m Message) AppendBinary(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(m.ID)))
	b = append(b, m.ID...)
	b = binary.AppendUvarint(b, uint64(len(m.Payload)))
	b = append(b, m.Payload...)
	return binary.AppendUvarint(b, uint64(m.tree))
}

// maxRoot bounds the root a copy may name (a rank of the job: the
// Broadcast checks it against its n).
const maxRoot = 1<<31 - 2

// ErrBadMessage is wrapped by every error ParseMessage returns.
var ErrBadMessage = errors.New("revoke: malformed message")

// ParseMessage decodes a message written by AppendBinary; b must hold exactly
// one. It accepts only the canonical encoding (so re-encoding the result
// yields b), never panics, and allocates no more than len(b) bytes whatever
// b holds. The result does not alias b: the caller may reuse b at once. An
// empty payload decodes as nil. Errors wrap ErrBadMessage.
func ParseMessage(b []byte) (Message, error) {
	id, b, err := readBytes(b)
	if err != nil {
		return Message{}, fmt.Errorf("%w: ID: %v", ErrBadMessage, err)
	}
	payload, b, err := readBytes(b)
	if err != nil {
		return Message{}, fmt.Errorf("%w: payload: %v", ErrBadMessage, err)
	}
	tree, k := binary.Uvarint(b)
	switch {
	case k <= 0:
		return Message{}, fmt.Errorf("%w: tree: truncated or overflowing", ErrBadMessage)
	case k != (bits.Len64(tree|1)+6)/7:
		return Message{}, fmt.Errorf("%w: tree: overlong", ErrBadMessage)
	case tree > maxRoot+1:
		return Message{}, fmt.Errorf("%w: tree root %d beyond %d", ErrBadMessage, tree-1, maxRoot)
	}
	b = b[k:]
	if len(b) != 0 {
		return Message{}, fmt.Errorf("%w: %d trailing bytes", ErrBadMessage, len(b))
	}
	m := Message{ID: string(id), tree: int(tree)}
	if len(payload) > 0 {
		m.Payload = append([]byte(nil), payload...)
	}
	return m, nil
}

// readBytes reads a minimally encoded uvarint length and that many bytes
// from the front of b. The bytes alias b.
func readBytes(b []byte) (field, rest []byte, err error) {
	v, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, b, errors.New("truncated or overflowing length")
	}
	if k != (bits.Len64(v|1)+6)/7 {
		return nil, b, errors.New("overlong length")
	}
	b = b[k:]
	if v > uint64(len(b)) {
		return nil, b, fmt.Errorf("length %d beyond the %d bytes left", v, len(b))
	}
	return b[:v], b[v:], nil
}
