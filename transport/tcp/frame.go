package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ftrma/ftrma/transport"
)

// Frames on a connection: a 4-byte big-endian length of what follows, a 1-byte
// type, then the type's fields. Type numbers are append-only.
const (
	frameWrite       byte = 1  // seq u64, key u32, off u64, data...
	frameRead        byte = 2  // seq u64, key u32, off u64, n u32
	frameCAS         byte = 3  // seq u64, key u32, off u64, old u64, new u64
	frameFAdd        byte = 4  // seq u64, key u32, off u64, delta u64
	frameMsg         byte = 5  // data...
	frameDone        byte = 6  // seq u64: every operation through seq is complete
	frameWriteErr    byte = 7  // seq u64, status u8
	frameReadReply   byte = 8  // seq u64, status u8, data...
	frameAtomicReply byte = 9  // seq u64, status u8, value u64
	frameBye         byte = 10 // the sender is closing its transport on purpose
	// frameReadReplyPad is a ReadReply whose data starts after pad bytes
	// of padding: seq u64, status u8, pad u8, pad bytes, data... Parsed as
	// a frameReadReply. A target sends its large answers so, the padding
	// putting the data at the same offset modulo 64 in the socket's stream
	// as in the target's memory (see gather.go).
	frameReadReplyPad byte = 11
	// frameWritePad is a Write whose data starts after pad bytes of
	// padding: seq u64, key u32, off u64, pad u8, pad bytes, data... Parsed
	// as a frameWrite. An origin sends its large writes so, the padding
	// putting the data at the same offset modulo 64 in the socket's stream
	// as in the caller's buffer.
	frameWritePad byte = 12
)

// maxPad is the most padding a frameReadReplyPad or frameWritePad carries.
const maxPad = 63

// zeros is padding.
var zeros [maxPad]byte

const (
	// maxChunk is the largest payload of one Write or Read frame; larger
	// operations are split.
	maxChunk = 1 << 20
	// maxFrame bounds the length field: a peer announcing more is broken.
	// The largest frame is a padded write.
	maxFrame = 1 + 8 + 4 + 8 + 1 + maxPad + maxChunk
	// hdr is the length field plus the type byte.
	hdr = 5
)

// fixedLen is the body length (type byte included) of each frame type apart
// from its variable data; 0 marks an unknown type.
var fixedLen = [...]int{
	frameWrite:        1 + 8 + 4 + 8,
	frameRead:         1 + 8 + 4 + 8 + 4,
	frameCAS:          1 + 8 + 4 + 8 + 8 + 8,
	frameFAdd:         1 + 8 + 4 + 8 + 8,
	frameMsg:          1,
	frameDone:         1 + 8,
	frameWriteErr:     1 + 8 + 1,
	frameReadReply:    1 + 8 + 1,
	frameAtomicReply:  1 + 8 + 1 + 8,
	frameBye:          1,
	frameReadReplyPad: 1 + 8 + 1 + 1,
	frameWritePad:     1 + 8 + 4 + 8 + 1,
}

// variable reports whether a frame type carries trailing data.
func variable(t byte) bool {
	return t == frameWrite || t == frameMsg || t == frameReadReply || t == frameReadReplyPad || t == frameWritePad
}

// frame is one decoded frame. Data aliases the buffer it was parsed from.
type frame struct {
	typ    byte
	seq    uint64
	key    uint32
	off    uint64
	a, b   uint64 // read length; CAS old, new; FAdd delta; atomic reply value
	status uint8
	data   []byte
}

var errFrame = errors.New("tcp: malformed frame")

// parseFrame decodes the frame at the start of b. It returns the number of
// bytes consumed, or 0 with a nil error when b holds only part of a frame. It
// never panics on any input and does not allocate.
func parseFrame(b []byte) (f frame, n int, err error) {
	if len(b) < hdr {
		return f, 0, nil
	}
	body := binary.BigEndian.Uint32(b)
	t := b[4]
	if int(t) >= len(fixedLen) || fixedLen[t] == 0 {
		return f, 0, fmt.Errorf("%w: unknown type %d", errFrame, t)
	}
	if body > maxFrame || int(body) < fixedLen[t] || (!variable(t) && int(body) != fixedLen[t]) {
		return f, 0, fmt.Errorf("%w: type %d with length %d", errFrame, t, body)
	}
	if len(b) < 4+int(body) {
		return f, 0, nil
	}
	f.typ = t
	p := b[hdr : 4+body]
	be := binary.BigEndian
	switch t {
	case frameWrite, frameRead, frameCAS, frameFAdd:
		f.seq, f.key, f.off = be.Uint64(p), be.Uint32(p[8:]), be.Uint64(p[12:])
		q := p[20:]
		switch t {
		case frameWrite:
			f.data = q
		case frameRead:
			f.a = uint64(be.Uint32(q))
			if f.a > maxChunk {
				return f, 0, fmt.Errorf("%w: read of %d bytes", errFrame, f.a)
			}
		case frameCAS:
			f.a, f.b = be.Uint64(q), be.Uint64(q[8:])
		case frameFAdd:
			f.a = be.Uint64(q)
		}
	case frameWritePad:
		f.typ, f.seq, f.key, f.off = frameWrite, be.Uint64(p), be.Uint32(p[8:]), be.Uint64(p[12:])
		pad := int(p[20])
		if pad > maxPad || len(p) < 21+pad {
			return frame{}, 0, fmt.Errorf("%w: write with %d bytes of padding in %d", errFrame, pad, len(p))
		}
		f.data = p[21+pad:]
	case frameMsg:
		f.data = p
	case frameDone:
		f.seq = be.Uint64(p)
	case frameWriteErr, frameReadReply, frameAtomicReply:
		f.seq, f.status = be.Uint64(p), p[8]
		switch t {
		case frameReadReply:
			f.data = p[9:]
		case frameAtomicReply:
			f.a = be.Uint64(p[9:])
		}
	case frameReadReplyPad:
		f.typ, f.seq, f.status = frameReadReply, be.Uint64(p), p[8]
		pad := int(p[9])
		if pad > maxPad || len(p) < 10+pad {
			return frame{}, 0, fmt.Errorf("%w: read answer with %d bytes of padding in %d", errFrame, pad, len(p))
		}
		f.data = p[10+pad:]
	}
	return f, 4 + int(body), nil
}

// appendHeader appends a frame header for type t whose body (type byte
// included) is n bytes long.
func appendHeader(b []byte, t byte, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return append(b, t)
}

// room returns b with room for a frame whose body is n bytes long, so that
// appending the frame never moves a large buffer in one piece (a target
// collecting a batch of read answers holds up to the batch's bytes; see
// transport.Grow).
func room(b []byte, n int) []byte { return transport.Grow(b, 4+n) }

// appendOp appends a request frame: Write (with data), Read (a = length), CAS
// (a = old, b = new) or FAdd (a = delta).
func appendOp(b []byte, t byte, seq uint64, key uint32, off uint64, a, c uint64, data []byte) []byte {
	b = room(b, fixedLen[t]+len(data))
	b = appendHeader(b, t, fixedLen[t]+len(data))
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint32(b, key)
	b = binary.BigEndian.AppendUint64(b, off)
	switch t {
	case frameWrite:
		b = append(b, data...)
	case frameRead:
		b = binary.BigEndian.AppendUint32(b, uint32(a))
	case frameCAS:
		b = binary.BigEndian.AppendUint64(b, a)
		b = binary.BigEndian.AppendUint64(b, c)
	case frameFAdd:
		b = binary.BigEndian.AppendUint64(b, a)
	}
	return b
}

// appendMsg appends a control-message frame.
func appendMsg(b []byte, msg []byte) []byte {
	b = room(b, 1+len(msg))
	return append(appendHeader(b, frameMsg, 1+len(msg)), msg...)
}

// appendDone appends a completion frame for every operation through seq.
func appendDone(b []byte, seq uint64) []byte {
	b = room(b, fixedLen[frameDone])
	return binary.BigEndian.AppendUint64(appendHeader(b, frameDone, fixedLen[frameDone]), seq)
}

// appendReply appends a WriteErr, ReadReply (with data) or AtomicReply (with
// value) frame.
func appendReply(b []byte, t byte, seq uint64, status uint8, value uint64, data []byte) []byte {
	b = room(b, fixedLen[t]+len(data))
	b = appendHeader(b, t, fixedLen[t]+len(data))
	b = binary.BigEndian.AppendUint64(b, seq)
	b = append(b, status)
	switch t {
	case frameReadReply:
		b = append(b, data...)
	case frameAtomicReply:
		b = binary.BigEndian.AppendUint64(b, value)
	}
	return b
}

// padHdr is the length of a frameReadReplyPad header before its padding,
// length field included.
const padHdr = 4 + 1 + 8 + 1 + 1

// appendPadHeader appends the header of a frameReadReplyPad answer with
// status OK, pad bytes of padding (zeros) and n bytes of data to follow.
func appendPadHeader(b []byte, seq uint64, pad, n int) []byte {
	b = appendHeader(b, frameReadReplyPad, fixedLen[frameReadReplyPad]+pad+n)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = append(b, transport.StatusOK, byte(pad))
	return append(b, zeros[:pad]...)
}
