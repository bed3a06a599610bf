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
}

// AppendBinary appends the encoding of m to b and returns the extended
// slice: uvarint(len(ID)), ID, uvarint(len(Payload)), Payload.
func (m Message) AppendBinary(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(m.ID)))
	b = append(b, m.ID...)
	b = binary.AppendUvarint(b, uint64(len(m.Payload)))
	return append(b, m.Payload...)
}

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
	if len(b) != 0 {
		return Message{}, fmt.Errorf("%w: %d trailing bytes", ErrBadMessage, len(b))
	}
	m := Message{ID: string(id)}
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
