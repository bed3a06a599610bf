package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, m := range []message{
		{code: reqStop},
		{code: reqGet, fields: [][]byte{[]byte("k")}},
		{code: reqPut, fields: [][]byte{[]byte("key"), {}}},
		{code: reqPut, fields: [][]byte{[]byte("key"), bytes.Repeat([]byte{0, 0xff, '\n'}, 1000)}},
		{code: statusError, fields: [][]byte{[]byte("no")}},
		listRequest([]byte("a/"), []byte("a/7"), 5),
		listReply([][]byte{[]byte("a"), []byte("b\n")}, true),
		{code: reqCAS, fields: [][]byte{[]byte("k"), {casOldAbsent}, {}, []byte("v")}},
		{code: reqPutIfVersion, fields: [][]byte{[]byte("k"), u64(7), {}}},
		{code: statusFailed},
	} {
		r := bytes.NewReader(appendFrame(appendFrame(nil, m), m)) // two frames in a row
		for range 2 {
			got, err := readFrame(r, 1<<20, 1<<20)
			if err != nil || got.code != m.code || !slices.EqualFunc(got.fields, m.fields, bytes.Equal) {
				t.Fatalf("%+v came back as %+v, %v", m, got, err)
			}
		}
		if _, err := readFrame(r, 1<<20, 1<<20); err != io.EOF {
			t.Errorf("after the frames: %v, want io.EOF", err)
		}
	}
}

// Malformed input is an error, never a panic; a malformed message in a
// whole frame leaves the stream in step, a frame over the limit or cut short
// does not.
func TestReadFrameMalformed(t *testing.T) {
	for _, c := range []struct {
		name      string
		in        []byte
		malformed bool  // a malformedError: the next frame can be read
		is        error // else an error that is this
	}{
		{"empty frame", []byte{0, 0, 0, 0}, true, nil},
		{"cut field length", []byte{0, 0, 0, 3, 2, 0, 0}, true, nil},
		{"field past the end", []byte{0, 0, 0, 6, 1, 0, 0, 0, 9, 'k'}, true, nil},
		{"huge field length", []byte{0, 0, 0, 5, 1, 0xff, 0xff, 0xff, 0xff}, true, nil},
		{"over the limit", []byte{0, 1, 0, 0, 1}, false, errFrameTooLarge},
		{"cut header", []byte{0, 0}, false, io.ErrUnexpectedEOF},
		{"cut body", []byte{0, 0, 0, 9, 1, 0, 0}, false, io.ErrUnexpectedEOF},
	} {
		_, err := readFrame(bytes.NewReader(c.in), 1000, 1<<20)
		var mal *malformedError
		if errors.As(err, &mal) != c.malformed || (c.is != nil && !errors.Is(err, c.is)) || err == nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestCheckRequest(t *testing.T) {
	k, v := []byte("k"), []byte("v")
	ver := u64(3)
	for _, c := range []struct {
		m  message
		ok bool
	}{
		{message{code: reqGet, fields: [][]byte{k}}, true},
		{message{code: reqPut, fields: [][]byte{k, v}}, true},
		{message{code: reqPut, fields: [][]byte{k, {}}}, true}, // an empty value is a value
		{message{code: reqDel, fields: [][]byte{k}}, true},
		{message{code: reqStop}, true},
		{message{code: reqGet}, false},
		{message{code: reqGet, fields: [][]byte{{}}}, false},
		{message{code: reqPut, fields: [][]byte{k}}, false},
		{message{code: reqPut, fields: [][]byte{{}, v}}, false},
		{message{code: reqDel, fields: [][]byte{k, v}}, false},
		{message{code: reqStop, fields: [][]byte{k}}, false},
		{message{code: 0}, false},
		{message{code: 200, fields: [][]byte{k}}, false},

		// ls: prefix and after may be empty; the limit is 4 bytes.
		{listRequest(nil, nil, 0), true},
		{listRequest(k, v, 1<<31), true},
		{message{code: reqList, fields: [][]byte{k, v}}, false},
		{message{code: reqList, fields: [][]byte{k, v, {0, 0, 1}}}, false},
		{message{code: reqList, fields: [][]byte{k, v, u64(1)}}, false},
		{message{code: reqLen}, true},
		{message{code: reqLen, fields: [][]byte{k}}, false},
		{message{code: reqGetVersion, fields: [][]byte{k}}, true},
		{message{code: reqGetVersion, fields: [][]byte{{}}}, false},
		{message{code: reqGetVersion}, false},

		// cas: a flag byte with known bits; no old value with "absent", no
		// new value with "delete".
		{message{code: reqCAS, fields: [][]byte{k, {0}, v, v}}, true},
		{message{code: reqCAS, fields: [][]byte{k, {0}, {}, {}}}, true}, // empty to empty
		{message{code: reqCAS, fields: [][]byte{k, {casOldAbsent}, {}, v}}, true},
		{message{code: reqCAS, fields: [][]byte{k, {casDelete}, v, {}}}, true},
		{message{code: reqCAS, fields: [][]byte{k, {casOldAbsent | casDelete}, {}, {}}}, true},
		{message{code: reqCAS, fields: [][]byte{k, {casOldAbsent}, v, v}}, false},
		{message{code: reqCAS, fields: [][]byte{k, {casDelete}, v, v}}, false},
		{message{code: reqCAS, fields: [][]byte{k, {4}, v, v}}, false},
		{message{code: reqCAS, fields: [][]byte{k, {}, v, v}}, false},
		{message{code: reqCAS, fields: [][]byte{k, {0, 0}, v, v}}, false},
		{message{code: reqCAS, fields: [][]byte{{}, {0}, v, v}}, false},
		{message{code: reqCAS, fields: [][]byte{k, {0}, v}}, false},

		// Versions are 8 bytes; del-if-version's is not 0.
		{message{code: reqPutIfVersion, fields: [][]byte{k, ver, v}}, true},
		{message{code: reqPutIfVersion, fields: [][]byte{k, u64(0), {}}}, true},
		{message{code: reqPutIfVersion, fields: [][]byte{k, ver[:7], v}}, false},
		{message{code: reqPutIfVersion, fields: [][]byte{k, ver}}, false},
		{message{code: reqPutIfVersion, fields: [][]byte{{}, ver, v}}, false},
		{message{code: reqDelIfVersion, fields: [][]byte{k, ver}}, true},
		{message{code: reqDelIfVersion, fields: [][]byte{k, u64(0)}}, false},
		{message{code: reqDelIfVersion, fields: [][]byte{k, append(ver, 0)}}, false},
		{message{code: reqDelIfVersion, fields: [][]byte{k}}, false},
	} {
		if err := checkRequest(c.m); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.m, err)
		}
	}
	for code := range requestFields {
		if reqName[code] == "" {
			t.Errorf("request type %d has no name", code)
		}
	}
}

func TestCheckReply(t *testing.T) {
	v := []byte("v")
	a, b := []byte("a"), []byte("b")
	for _, c := range []struct {
		req byte
		rep message
		ok  bool
	}{
		{reqGet, message{code: statusOK, fields: [][]byte{v}}, true},
		{reqGet, message{code: statusNotFound}, true},
		{reqPut, message{code: statusOK}, true},
		{reqStop, message{code: statusError, fields: [][]byte{v}}, true},
		{reqGet, message{code: statusOK}, false},
		{reqPut, message{code: statusOK, fields: [][]byte{v}}, false},
		{reqDel, message{code: statusNotFound}, false},
		{reqPut, message{code: statusError}, false},
		{reqPut, message{code: 9}, false},

		// ls: a more flag of 0 or 1, then keys, non-empty and increasing;
		// "more" comes with a key to go on from.
		{reqList, listReply(nil, false), true},
		{reqList, listReply([][]byte{a, b}, true), true},
		{reqList, listReply([][]byte{a}, false), true},
		{reqList, message{code: statusOK}, false},
		{reqList, listReply(nil, true), false},
		{reqList, listReply([][]byte{b, a}, false), false},
		{reqList, listReply([][]byte{a, a}, false), false},
		{reqList, listReply([][]byte{a, {}}, false), false},
		{reqList, message{code: statusOK, fields: [][]byte{{2}, a}}, false},
		{reqList, message{code: statusOK, fields: [][]byte{{0, 0}, a}}, false},
		{reqList, message{code: statusNotFound}, false},
		{reqLen, message{code: statusOK, fields: [][]byte{u64(5)}}, true},
		{reqLen, message{code: statusOK, fields: [][]byte{{5}}}, false},
		{reqLen, message{code: statusOK}, false},
		{reqGetVersion, message{code: statusOK, fields: [][]byte{u64(5), v}}, true},
		{reqGetVersion, message{code: statusOK, fields: [][]byte{u64(5), {}}}, true},
		{reqGetVersion, message{code: statusNotFound}, true},
		{reqGetVersion, message{code: statusOK, fields: [][]byte{v}}, false},
		{reqGetVersion, message{code: statusOK, fields: [][]byte{{5}, v}}, false},

		// Conditional writes: done, or not done; nothing else says "failed".
		{reqCAS, message{code: statusOK}, true},
		{reqCAS, message{code: statusFailed}, true},
		{reqPutIfVersion, message{code: statusFailed}, true},
		{reqDelIfVersion, message{code: statusFailed}, true},
		{reqCAS, message{code: statusFailed, fields: [][]byte{v}}, false},
		{reqCAS, message{code: statusNotFound}, false},
		{reqPut, message{code: statusFailed}, false},
		{reqGet, message{code: statusFailed}, false},
	} {
		if err := checkReply(c.req, c.rep); (err == nil) != c.ok {
			t.Errorf("reply %+v to %d: %v", c.rep, c.req, err)
		}
	}
}

// Whatever the bytes, reading a frame and checking it as a request or a
// reply returns or errs without panicking, and a message read back encodes
// to the same bytes.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, message{code: reqPut, fields: [][]byte{[]byte("k"), []byte("v")}}))
	f.Add(appendFrame(nil, message{code: reqStop}))
	f.Add([]byte{0, 0, 0, 5, 1, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(appendFrame(nil, listRequest([]byte("p"), []byte("p/1"), 10)))
	f.Add(appendFrame(nil, listReply([][]byte{[]byte("a"), []byte("b")}, true)))
	f.Add(appendFrame(nil, message{code: reqLen}))
	f.Add(appendFrame(nil, message{code: statusOK, fields: [][]byte{u64(9)}}))
	f.Add(appendFrame(nil, message{code: reqGetVersion, fields: [][]byte{[]byte("k")}}))
	f.Add(appendFrame(nil, message{code: statusOK, fields: [][]byte{u64(9), []byte("v")}}))
	f.Add(appendFrame(nil, message{code: reqCAS, fields: [][]byte{[]byte("k"), {casOldAbsent}, {}, []byte("v")}}))
	f.Add(appendFrame(nil, message{code: reqPutIfVersion, fields: [][]byte{[]byte("k"), u64(1), []byte("v")}}))
	f.Add(appendFrame(nil, message{code: reqDelIfVersion, fields: [][]byte{[]byte("k"), u64(1)}}))
	f.Add(appendFrame(nil, message{code: statusFailed}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := readFrame(bytes.NewReader(b), 1<<16, 1<<20)
		if err != nil {
			return
		}
		checkRequest(m)
		for code := range requestFields {
			checkReply(code, m)
		}
		parseListReply(m)
		n := 4 + int(binary.BigEndian.Uint32(b))
		if again := appendFrame(nil, m); !bytes.Equal(again, b[:n]) {
			t.Fatalf("%x read as %+v encodes as %x", b[:n], m, again)
		}
	})
}

// parseMessage allocates a bounded multiple of the frame: a frame of empty
// fields (the most fields per byte) takes one slice of exactly their
// count; a request with more fields than any request has is refused
// before anything is allocated for them.
func TestParseMessageBoundedAllocation(t *testing.T) {
	const n = 1 << 20
	body := make([]byte, 1+n) // code, then n/4 empty fields
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := parseMessage(body, n/4)
	runtime.ReadMemStats(&after)
	if err != nil || len(m.fields) != n/4 {
		t.Fatalf("%d fields, %v", len(m.fields), err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8*n {
		t.Errorf("parsing a frame of %d bytes allocated %d bytes (%.1fx)", n, got, float64(got)/n)
	}
	if _, err := parseMessage(body, maxRequestFields); err == nil {
		t.Errorf("a request of %d fields was accepted", n/4)
	}
	runtime.ReadMemStats(&before)
	parseMessage(body, maxRequestFields)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Errorf("refusing a request of %d fields allocated %d bytes", n/4, got)
	}
}
