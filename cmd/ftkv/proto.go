package main

import (
	"bytes"
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
// reply is its status. Codes are append-only: a new request type is one more
// code, which a server that does not know it answers with statusError.
//
// Fixed-width fields: a flag byte, a uint32 or a uint64, big-endian. A key
// is never empty; a value may be. A version is the store's (GetVersion): 0
// means "the key has no value".
const (
	reqGet  byte = 1 // fields: key. Reply: statusOK value, or statusNotFound
	reqPut  byte = 2 // fields: key, value. Reply: statusOK
	reqDel  byte = 3 // fields: key. Reply: statusOK (also for a missing key)
	reqStop byte = 4 // no fields. Reply: statusOK, then every rank of the job stops

	// fields: prefix, after, limit:uint32. Reply: statusOK more:byte key*,
	// one page of store.Scan: the keys with prefix after after (empty: from
	// the first), in byte order, at most limit of them (0: the server's page
	// size, which also bounds a non-zero limit, as does a byte bound); more
	// is 1 when keys follow (ask again with after = the last key), else 0.
	reqList byte = 5
	// no fields. Reply: statusOK count:uint64 (store.Len).
	reqLen byte = 6
	// fields: key. Reply: statusOK version:uint64 value, or statusNotFound.
	reqGetVersion byte = 7
	// fields: key, flags:byte, old, new (store.CompareAndSwap). Flag
	// casOldAbsent: the key must have no value (old is empty); flag
	// casDelete: delete the key (new is empty). Reply: statusOK when swapped,
	// statusFailed when not.
	reqCAS byte = 8
	// fields: key, version:uint64, value (store.PutIfVersion). Reply:
	// statusOK when stored, statusFailed when the version differs.
	reqPutIfVersion byte = 9
	// fields: key, version:uint64, at least 1 (store.DeleteIfVersion).
	// Reply: statusOK when deleted, statusFailed when the version differs.
	reqDelIfVersion byte = 10
	// no fields: a snapshot of the whole store (ftkv serve --snapshot-dir),
	// taken after the request arrived. Reply: statusOK dir, cut:uint64,
	// keys:uint64 (store.SnapshotInfo).
	reqSnapshot byte = 11

	statusOK       byte = 0 // fields: the request's results
	statusNotFound byte = 1 // no fields
	statusError    byte = 2 // fields: a message for the user
	statusFailed   byte = 3 // no fields: a conditional write's condition did not hold
)

// Flags of a reqCAS.
const (
	casOldAbsent byte = 1 << iota
	casDelete
)

// fieldKind is the kind of a request's or a reply's field.
type fieldKind byte

const (
	fKey   fieldKind = iota // non-empty bytes
	fBytes                  // any bytes: a value, a prefix
	fFlag                   // one byte
	fU32                    // 4 bytes, big-endian
	fU64                    // 8 bytes, big-endian
)

// requestFields are the fields of each request type.
var requestFields = map[byte][]fieldKind{
	reqGet:          {fKey},
	reqPut:          {fKey, fBytes},
	reqDel:          {fKey},
	reqStop:         {},
	reqList:         {fBytes, fBytes, fU32},
	reqLen:          {},
	reqGetVersion:   {fKey},
	reqCAS:          {fKey, fFlag, fBytes, fBytes},
	reqPutIfVersion: {fKey, fU64, fBytes},
	reqDelIfVersion: {fKey, fU64},
	reqSnapshot:     {},
}

// okFields are the fields of a statusOK reply to each request type; a
// reqList's reply has any number of keys after them.
var okFields = map[byte][]fieldKind{
	reqGet:        {fBytes},
	reqList:       {fFlag},
	reqLen:        {fU64},
	reqGetVersion: {fU64, fBytes},
	reqSnapshot:   {fBytes, fU64, fU64},
}

// reqName names request codes in messages.
var reqName = map[byte]string{
	reqGet: "get", reqPut: "put", reqDel: "del", reqStop: "stop",
	reqList: "ls", reqLen: "len", reqGetVersion: "get-version", reqCAS: "cas",
	reqPutIfVersion: "put-if-version", reqDelIfVersion: "del-if-version", reqSnapshot: "snapshot",
}

// maxRequest is the largest request message (not counting its length
// prefix) with keys of at most maxKey and values of at most maxValue bytes:
// a bound on a cas's (a key and two values) and an ls's (two keys).
func maxRequest(maxValue int) int { return 1 + 4*4 + 8 + 2*maxKey + 2*maxValue }

// maxReply is the largest reply message a client reads: a value with its
// version, or a page of keys (listPageBytes).
const maxReply = 1 + 4*2 + 8 + maxValueLimit

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

// maxRequestFields is the most fields a request has (requestFields).
const maxRequestFields = 4

// readFrame reads one frame of at most max bytes (not counting its length
// prefix) from r and returns its message (parseMessage, at most maxFields
// fields). io.EOF means the stream ended cleanly before a frame,
// io.ErrUnexpectedEOF inside one.
func readFrame(r io.Reader, max, maxFields int) (message, error) {
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
	m, err := parseMessage(body, maxFields)
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

// parseMessage splits a frame's body into its code and at most maxFields
// fields, which alias b. It never panics, whatever b holds, and allocates
// one slice of exactly the fields' count (a first pass counts them): at
// most 24 bytes per 4 bytes of b, and nothing for a message with too many.
func parseMessage(b []byte, maxFields int) (message, error) {
	if len(b) == 0 {
		return message{}, errors.New("empty message")
	}
	m := message{code: b[0]}
	b = b[1:]
	count := 0
	for rest := b; len(rest) > 0; count++ {
		if len(rest) < 4 {
			return message{}, fmt.Errorf("message cut inside a field's length (%d bytes left)", len(rest))
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return message{}, fmt.Errorf("field of %d bytes with %d left", n, len(rest))
		}
		if count == maxFields {
			return message{}, fmt.Errorf("more than %d fields", maxFields)
		}
		rest = rest[n:]
	}
	if count > 0 {
		m.fields = make([][]byte, 0, count)
	}
	for len(b) > 0 {
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		m.fields = append(m.fields, b[:n:n])
		b = b[n:]
	}
	return m, nil
}

// checkRequest checks that m is a known request with the right fields.
func checkRequest(m message) error {
	kinds, ok := requestFields[m.code]
	if !ok {
		return fmt.Errorf("unknown request type %d", m.code)
	}
	name := reqName[m.code]
	if len(m.fields) != len(kinds) {
		return fmt.Errorf("%s request with %d fields, want %d", name, len(m.fields), len(kinds))
	}
	if err := checkFields(m.fields, kinds); err != nil {
		return fmt.Errorf("%s request: %w", name, err)
	}
	switch m.code {
	case reqCAS:
		flags := m.fields[1][0]
		switch {
		case flags&^(casOldAbsent|casDelete) != 0:
			return fmt.Errorf("cas request with unknown flags %#x", flags)
		case flags&casOldAbsent != 0 && len(m.fields[2]) > 0:
			return errors.New("cas request: an old value with the flag \"old absent\"")
		case flags&casDelete != 0 && len(m.fields[3]) > 0:
			return errors.New("cas request: a new value with the flag \"delete\"")
		}
	case reqDelIfVersion:
		if binary.BigEndian.Uint64(m.fields[1]) == 0 {
			return errors.New("del-if-version request with version 0 (no key has it)")
		}
	}
	return nil
}

// checkFields checks fields against their kinds.
func checkFields(fields [][]byte, kinds []fieldKind) error {
	for i, k := range kinds {
		n := len(fields[i])
		switch {
		case k == fKey && n == 0:
			return fmt.Errorf("field %d: an empty key", i+1)
		case k == fFlag && n != 1, k == fU32 && n != 4, k == fU64 && n != 8:
			return fmt.Errorf("field %d: %d bytes, want %d", i+1, n, map[fieldKind]int{fFlag: 1, fU32: 4, fU64: 8}[k])
		}
	}
	return nil
}

// checkReply checks that rep is a well-formed reply to a request of type
// code.
func checkReply(code byte, rep message) error {
	var kinds []fieldKind
	switch rep.code {
	case statusOK:
		kinds = okFields[code]
	case statusNotFound:
		if code != reqGet && code != reqGetVersion {
			return fmt.Errorf("malformed reply: not found, to a %s", reqName[code])
		}
	case statusFailed:
		if code != reqCAS && code != reqPutIfVersion && code != reqDelIfVersion {
			return fmt.Errorf("malformed reply: condition failed, to a %s", reqName[code])
		}
	case statusError:
		kinds = []fieldKind{fBytes}
	default:
		return fmt.Errorf("malformed reply: status %d", rep.code)
	}
	if len(rep.fields) != len(kinds) && !(rep.code == statusOK && code == reqList && len(rep.fields) > len(kinds)) {
		return fmt.Errorf("malformed reply: status %d with %d fields, want %d", rep.code, len(rep.fields), len(kinds))
	}
	if err := checkFields(rep.fields, kinds); err != nil {
		return fmt.Errorf("malformed reply: %w", err)
	}
	if rep.code == statusOK && code == reqList {
		if _, _, err := parseListReply(rep); err != nil {
			return fmt.Errorf("malformed reply: %w", err)
		}
	}
	return nil
}

// listRequest is a reqList for the page of keys with prefix after after, at
// most limit of them (0: the server's page size).
func listRequest(prefix, after []byte, limit uint32) message {
	return message{code: reqList, fields: [][]byte{prefix, after, binary.BigEndian.AppendUint32(nil, limit)}}
}

// listReply is the statusOK reply to a reqList.
func listReply(keys [][]byte, more bool) message {
	flag := byte(0)
	if more {
		flag = 1
	}
	return message{code: statusOK, fields: append([][]byte{{flag}}, keys...)}
}

// parseListReply returns the keys and the more flag of a reqList's statusOK
// reply (fields checked by checkReply): the keys are non-empty and in
// strictly increasing byte order, and more comes with at least one key, so
// that a client that asks again after the last key always makes progress.
func parseListReply(rep message) (keys [][]byte, more bool, err error) {
	if len(rep.fields) == 0 || len(rep.fields[0]) != 1 || rep.fields[0][0] > 1 {
		return nil, false, errors.New("ls reply without a more flag of 0 or 1")
	}
	more, keys = rep.fields[0][0] == 1, rep.fields[1:]
	if more && len(keys) == 0 {
		return nil, false, errors.New("ls reply: more keys, but none in this page")
	}
	for i, k := range keys {
		if len(k) == 0 {
			return nil, false, fmt.Errorf("ls reply: key %d is empty", i+1)
		}
		if i > 0 && bytes.Compare(keys[i-1], k) >= 0 {
			return nil, false, fmt.Errorf("ls reply: key %d is not after key %d", i+1, i)
		}
	}
	return keys, more, nil
}

// u64 encodes a uint64 field.
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
