package tcp

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestParseFrameRoundTrip(t *testing.T) {
	frames := [][]byte{
		appendOp(nil, frameWrite, 1, 2, 3, 0, 0, []byte("hello")),
		appendOp(nil, frameWrite, 1, 2, 3, 0, 0, nil),
		appendOp(nil, frameRead, 4, 5, 6, 77, 0, nil),
		appendOp(nil, frameCAS, 7, 8, 16, 1, 2, nil),
		appendOp(nil, frameFAdd, 9, 10, 24, 3, 0, nil),
		appendMsg(nil, []byte("control")),
		appendDone(nil, 11),
		appendReply(nil, frameWriteErr, 12, 2, 0, nil),
		appendReply(nil, frameReadReply, 13, 0, 0, []byte("data")),
		appendReply(nil, frameAtomicReply, 14, 0, 99, nil),
		append(appendPadHeader(nil, 15, 5, 3), "pad"...),
		append(appendPadHeader(nil, 16, 0, 2), "np"...),
		writePad(17, 18, 19, 7, "padded write"),
	}
	var stream []byte
	for _, f := range frames {
		stream = append(stream, f...)
	}
	var got []frame
	for len(stream) > 0 {
		f, n, err := parseFrame(stream)
		if err != nil || n == 0 {
			t.Fatalf("parse: n=%d err=%v", n, err)
		}
		got = append(got, f)
		stream = stream[n:]
	}
	if len(got) != len(frames) {
		t.Fatalf("parsed %d frames, want %d", len(got), len(frames))
	}
	checks := []struct {
		i    int
		ok   bool
		what string
	}{
		{0, got[0].typ == frameWrite && got[0].seq == 1 && got[0].key == 2 && got[0].off == 3 && string(got[0].data) == "hello", "write"},
		{1, got[1].typ == frameWrite && len(got[1].data) == 0, "empty write"},
		{2, got[2].typ == frameRead && got[2].seq == 4 && got[2].a == 77, "read"},
		{3, got[3].typ == frameCAS && got[3].off == 16 && got[3].a == 1 && got[3].b == 2, "cas"},
		{4, got[4].typ == frameFAdd && got[4].a == 3, "fadd"},
		{5, got[5].typ == frameMsg && string(got[5].data) == "control", "msg"},
		{6, got[6].typ == frameDone && got[6].seq == 11, "done"},
		{7, got[7].typ == frameWriteErr && got[7].status == 2, "write error"},
		{8, got[8].typ == frameReadReply && string(got[8].data) == "data", "read reply"},
		{9, got[9].typ == frameAtomicReply && got[9].a == 99, "atomic reply"},
		{10, got[10].typ == frameReadReply && got[10].seq == 15 && got[10].status == 0 && string(got[10].data) == "pad", "padded read reply"},
		{11, got[11].typ == frameReadReply && got[11].seq == 16 && string(got[11].data) == "np", "read reply with no padding"},
		{12, got[12].typ == frameWrite && got[12].seq == 17 && got[12].key == 18 && got[12].off == 19 && string(got[12].data) == "padded write", "padded write"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("frame %d (%s) decoded wrongly: %+v", c.i, c.what, got[c.i])
		}
	}
}

func TestParseFrameRejectsGarbage(t *testing.T) {
	bad := [][]byte{
		{0, 0, 0, 2, 99, 1},                                               // unknown type
		{0, 0, 0, 1, 0},                                                   // type 0
		{0xff, 0xff, 0xff, 0xff, frameWrite},                              // absurd length
		{0, 0, 0, 3, frameDone, 0, 0},                                     // too short for its type
		{0, 0, 0, 30, frameDone},                                          // fixed-size type with a wrong length
		appendOp(nil, frameRead, 1, 1, 0, maxChunk+1, 0, nil),             // read larger than a chunk
		{0, 0, 0, 11, frameReadReplyPad, 0, 0, 0, 0, 0, 0, 0, 1, 0, 64},   // padding above maxPad
		{0, 0, 0, 12, frameReadReplyPad, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0}, // padding past the frame
		{0, 0, 0, 10, frameReadReplyPad, 0, 0, 0, 0, 0, 0, 0, 1, 0},       // no padding length
		writePad(1, 1, 0, 64, "x"),                                        // write padding above maxPad
		writePad(1, 1, 0, 3, "")[:4+22+2],                                 // write padding past the frame (length fixed below)
	}
	binary.BigEndian.PutUint32(bad[len(bad)-1], 22+2)
	for i, b := range bad {
		if _, _, err := parseFrame(b); err == nil {
			t.Errorf("garbage %d (%x) accepted", i, b)
		}
	}
	// A partial frame is not an error.
	full := appendMsg(nil, []byte("abc"))
	for i := range len(full) {
		if _, n, err := parseFrame(full[:i]); n != 0 || err != nil {
			t.Fatalf("prefix of %d bytes: n=%d err=%v", i, n, err)
		}
	}
}

// FuzzParseFrame checks that no input panics the decoder, that a decoded
// frame never claims more bytes than given, and that re-encoding a decoded
// frame reproduces its bytes.
func FuzzParseFrame(f *testing.F) {
	f.Add(appendOp(nil, frameWrite, 1, 2, 3, 0, 0, []byte("x")))
	f.Add(appendOp(nil, frameCAS, 1, 2, 8, 4, 5, nil))
	f.Add(appendReply(nil, frameReadReply, 1, 0, 0, []byte("yy")))
	f.Add(appendDone(nil, 3))
	f.Add(append(appendPadHeader(nil, 1, 3, 2), "zz"...))
	f.Add(writePad(1, 2, 3, 4, "ww"))
	f.Add([]byte{0, 0, 0, 2, 99, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := parseFrame(b)
		if err != nil || n == 0 {
			return
		}
		if n > len(b) {
			t.Fatalf("consumed %d of %d bytes", n, len(b))
		}
		if typ := b[4]; typ == frameReadReplyPad || typ == frameWritePad {
			// Decoded as a read answer or a write; the padding is not kept.
			fl := 4 + fixedLen[typ]
			if pad := int(b[fl-1]); fl+pad+len(fr.data) != n || !bytes.Equal(fr.data, b[n-len(fr.data):n]) ||
				typ == frameReadReplyPad && fr.typ != frameReadReply || typ == frameWritePad && fr.typ != frameWrite {
				t.Fatalf("padded frame %x decoded as %+v", b[:n], fr)
			}
			return
		}
		var again []byte
		switch fr.typ {
		case frameWrite, frameRead, frameCAS, frameFAdd:
			again = appendOp(nil, fr.typ, fr.seq, fr.key, fr.off, fr.a, fr.b, fr.data)
		case frameMsg:
			again = appendMsg(nil, fr.data)
		case frameDone:
			again = appendDone(nil, fr.seq)
		case frameBye:
			again = appendHeader(nil, frameBye, 1)
		default:
			again = appendReply(nil, fr.typ, fr.seq, fr.status, fr.a, fr.data)
		}
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding %x gave %x", b[:n], again)
		}
	})
}

// writePad returns a frameWritePad with pad bytes of padding.
func writePad(seq uint64, key uint32, off uint64, pad int, data string) []byte {
	b := appendHeader(nil, frameWritePad, fixedLen[frameWritePad]+pad+len(data))
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint32(b, key)
	b = binary.BigEndian.AppendUint64(b, off)
	b = append(b, byte(pad))
	b = append(b, make([]byte, pad)...)
	return append(b, data...)
}
