package store

import (
	"bytes"
	"testing"
)

// FuzzDecodeRecord: a heap block read from a peer is arbitrary bytes (torn,
// overwritten, or garbage). decodeRecord never panics on it; what it
// accepts re-encodes to the same bytes, and its slices stay inside b.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []record{
		{hash: 1, version: 2, tx: 3, key: []byte("k"), value: []byte("value")},
		{hash: ^uint64(0), key: []byte("a longer key"), value: nil, deleted: true},
		{},
	} {
		b := make([]byte, recordLen(len(r.key), len(r.value)))
		encodeRecord(b, r)
		f.Add(b)
	}
	f.Add(make([]byte, recHeader))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, ok := decodeRecord(b)
		if !ok {
			return
		}
		if len(r.key)+len(r.value) > len(b)-recHeader {
			t.Fatalf("decoded %d+%d bytes of key and value from a %d-byte record", len(r.key), len(r.value), len(b))
		}
		again := make([]byte, recordLen(len(r.key), len(r.value)))
		encodeRecord(again, record{hash: r.hash, version: r.version, tx: r.tx, key: bytes.Clone(r.key), value: bytes.Clone(r.value), deleted: r.deleted})
		// Flag bits other than recDeleted are not kept: compare without them.
		want := bytes.Clone(b)
		want[36] &= recDeleted
		clear(want[37:40])
		if !bytes.Equal(again[:32], want[:32]) || !bytes.Equal(again[36:], want[36:]) {
			t.Fatalf("record %x decoded as %+v re-encodes as %x", b, r, again)
		}
		id := ident{h: r.hash, key: string(r.key)}
		if !r.is(id) {
			t.Fatalf("record %+v is not of its own key", r)
		}
		isKeyBlock(b, id) // never panics, whatever b is
	})
}
