package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The protocol between the ftkv client commands and "ftkv serve", over a Unix
// domain socket. A connection carries any number of requests, one at a time:
// the client writes a request frame and reads the reply frame.
//
// A frame is a message prefixed by its length:
//
//	frame   = length:uint32 message        (big-endian; length counts message)
//	message = code:byte field*
//	field   = length:uint32 bytes
//
// The code of a request names its type and fixes its fields; the code of a
// reply is its status. Codes are append-only: a new request type (an ls that
// lists keys by prefix, with fields prefix, limit and continuation, answered by
// the keys and the next continuation) is one more code, which a server that
// does not know it answers with statusError.
const (
	reqGet  byte = 1 // fields: key. Reply: statusOK value, or statusNotFound
	reqPut  byte = 2 // fields: key, value. Reply: statusOK
	reqDel  byte = 3 // fields: key. Reply: statusOK (also for a missing key)
	reqStop byte = 4 // no fields. Reply: statusOK, then every rank of the job stops

	statusOK       byte = 0 // fields: the request's results
	statusNotFound byte = 1 // no fields
	statusError    byte = 2 // fields: a message for the user
)

// fieldsOf is the number of fields of each request type.
var fieldsOf = map[byte]int{reqGet: 1, reqPut: 2, reqDel: 1, reqStop: 0}

// reqName names request codes in messages.
var reqName = map[byte]string{reqGet: "get", reqPut: "put", reqDel: "del", reqStop: "stop"}

// frameOverhead is what a frame holding a key and a value of at most maxKey
// and maxValue bytes adds to them: the lengths and the code.
const frameOverhead = 4 + 1 + 4 + 4

// message is a request or a reply.
type message struct {
	code   byte
	fields [][]byte
}

// appendFrame appends m as a frame to b.
func appendFrame(b []byte, m message) []byte {
	n := 1
	for _, f := range m.fields {
		n += 4 + len(f)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, m.code)
	for _, f := range m.fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// errFrameTooLarge: a frame's length is above the reader's limit. The stream
// cannot be resynchronized after it (the frame is not read).
var errFrameTooLarge = errors.New("frame too large")

// readFrame reads one frame of at most max bytes (not counting its length
// prefix) from r and returns its message (parseMessage). io.EOF means the
// stream ended cleanly before a frame, io.ErrUnexpectedEOF inside one.
func readFrame(r io.Reader, max int) (message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return message{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return message{}, fmt.Errorf("%w: %d bytes, at most %d", errFrameTooLarge, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return message{}, err
	}
	m, err := parseMessage(body)
	if err != nil {
		return message{}, &malformedError{err}
	}
	return m, nil
}

// malformedError: a whole frame arrived, but its message is malformed. The
// stream is still in step: the next frame can be read.
type malformedError struct{ err error }

func (e *malformedError) Error() string { return "malformed message: " + e.err.Error() }
func (e *malformedError) Unwrap() error { return e.err }

// parseMessage splits a frame's body into its code and fields. It never
// panics, whatever b holds.
func parseMessage(b []byte) (message, error) {
	if len(b) == 0 {
		return message{}, errors.New("empty message")
	}
	m := message{code: b[0]}
	b = b[1:]
	for len(b) > 0 {
		if len(b) < 4 {
			return message{}, fmt.Errorf("message cut inside a field's length (%d bytes left)", len(b))
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(n) > uint64(len(b)) {
			return message{}, fmt.Errorf("field of %d bytes with %d left", n, len(b))
		}
		m.fields = append(m.fields, b[:n:n])
		b = b[n:]
	}
	return m, nil
}

// checkRequest checks that m is a known request with the right fields: a
// non-empty key for get, put and del.
func checkRequest(m message) error {
	want, ok := fieldsOf[m.code]
	if !ok {
		return fmt.Errorf("unknown request type %d", m.code)
	}
	if len(m.fields) != want {
		return fmt.Errorf("%s request with %d fields, want %d", reqName[m.code], len(m.fields), want)
	}
	if want > 0 && len(m.fields[0]) == 0 {
		return fmt.Errorf("%s request with an empty key", reqName[m.code])
	}
	return nil
}

// checkReply checks that rep is a well-formed reply to a request of type
// code.
func checkReply(code byte, rep message) error {
	want := 0
	switch rep.code {
	case statusOK:
		if code == reqGet {
			want = 1
		}
	case statusNotFound:
		if code != reqGet {
			return fmt.Errorf("malformed reply: not found, to a %s", reqName[code])
		}
	case statusError:
		want = 1
	default:
		return fmt.Errorf("malformed reply: status %d", rep.code)
	}
	if len(rep.fields) != want {
		return fmt.Errorf("malformed reply: status %d with %d fields, want %d", rep.code, len(rep.fields), want)
	}
	return nil
}
