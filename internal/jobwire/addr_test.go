package jobwire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ftrma/ftrma"
)

// Split addresses round-trip through publish, and each rank's list holds
// every address as that rank gets it: the common part and its own part;
// whole addresses mix with split ones.
func TestAddrsColumnRoundTrip(t *testing.T) {
	const size = 3
	split := func(q int) Addr {
		parts := make([]string, size)
		for r := range parts {
			parts[r] = fmt.Sprintf("%d>%d", q, r)
		}
		a, err := SplitAddr(fmt.Sprintf("rank%d/", q), parts)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	addrs := []Addr{split(0), WholeAddr("tcp:whole"), split(2)}
	for q, a := range addrs {
		got, err := ParsePublish(a.Append(nil), q, size)
		if err != nil || got != a {
			t.Fatalf("publish round trip of rank %d: %+v, %v; want %+v", q, got, err, a)
		}
	}
	commons := AppendCommons(nil, addrs)
	for r := range size {
		p := AppendAddrs(nil, addrs, r)
		if !bytes.HasPrefix(p, commons) || len(p) != AddrsLen(addrs) {
			t.Fatalf("rank %d's list %q: not commons %q then its column, or not %d bytes", r, p, commons, AddrsLen(addrs))
		}
		list, err := ParseAddrs(p)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{fmt.Sprintf("rank0/0>%d", r), "tcp:whole", fmt.Sprintf("rank2/2>%d", r)}
		if strings.Join(list, " ") != strings.Join(want, " ") {
			t.Errorf("rank %d got %q, want %q", r, list, want)
		}
	}
	if _, err := SplitAddr("c/", []string{"ab", "abc"}); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("SplitAddr with parts of two widths: %v, want ErrInvalid", err)
	}
}

// An address over a limit is an error that names the limit, the size and
// the rank, wherever it is found: before publishing and in a publish.
func TestAddrOverLimit(t *testing.T) {
	const size, rank = 4, 3
	tests := []struct {
		name  string
		addr  Addr
		limit string
		sz    int
	}{
		{"whole", WholeAddr(strings.Repeat("a", MaxAddr+1)), "MaxAddr", MaxAddr + 1},
		{"common", Addr{Common: strings.Repeat("a", MaxAddr+7), Width: 1, Parts: "abcd"}, "MaxAddr", MaxAddr + 7},
		{"part", Addr{Common: "a", Width: MaxAddrPart + 1, Parts: strings.Repeat("p", size*(MaxAddrPart+1))}, "MaxAddrPart", MaxAddrPart + 1},
	}
	for _, tt := range tests {
		for how, err := range map[string]error{
			"Check":        tt.addr.Check(rank, size),
			"ParsePublish": func() error { _, err := ParsePublish(tt.addr.Append(nil), rank, size); return err }(),
		} {
			le, ok := errors.AsType[*LimitError](err)
			if !ok || !errors.Is(err, ErrTooLarge) {
				t.Errorf("%s: %s: %v, want a *LimitError", tt.name, how, err)
				continue
			}
			if le.Rank != rank || le.Limit != tt.limit || le.Size != tt.sz {
				t.Errorf("%s: %s: %+v, want rank %d, %s, %d bytes", tt.name, how, le, rank, tt.limit, tt.sz)
			}
			for _, want := range []string{fmt.Sprintf("rank %d", rank), "jobwire." + tt.limit, fmt.Sprint(tt.sz)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %s: %q does not say %q", tt.name, how, err, want)
				}
			}
		}
	}
	// Within the limits.
	for _, a := range []Addr{
		WholeAddr(strings.Repeat("a", MaxAddr)),
		{Common: strings.Repeat("a", MaxAddr), Width: MaxAddrPart, Parts: strings.Repeat("p", size*MaxAddrPart)},
	} {
		if err := a.Check(rank, size); err != nil {
			t.Errorf("Check: %v", err)
		}
		if n := len(AppendFrame(nil, MsgPublish, a.Append(nil))) - 4; n > MaxPublish(size) {
			t.Errorf("a publish frame of %d bytes within the limits, MaxPublish(%d) = %d", n, size, MaxPublish(size))
		}
	}
	// Not a size: malformed.
	for name, a := range map[string]Addr{
		"empty":       WholeAddr(""),
		"short parts": {Common: "a", Width: 2, Parts: "abc"},
	} {
		if err := a.Check(rank, size); !errors.Is(err, ftrma.ErrInvalid) || errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: Check = %v, want ErrInvalid", name, err)
		}
	}
}

func TestParsePublishRejects(t *testing.T) {
	for _, p := range [][]byte{
		nil,
		{0},
		{0, 1, 'a'},         // no width
		{0, 2, 'a', 0},      // common longer than the rest
		{0, 1, 'a', 1, 'x'}, // one part for 2 ranks
		{0, 1, 'a', 1, 'x', 'y', 'z'},
		{0, 0, 0}, // empty
	} {
		if a, err := ParsePublish(p, 0, 2); !errors.Is(err, ErrMalformed) && !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("ParsePublish(%v) = %+v, %v; want a malformed publish", p, a, err)
		}
	}
}

// A frame over ReadFrame's bound is a *FrameTooLongError saying how long,
// and its bytes are left unread, so that a server can answer and read them
// away.
func TestReadFrameTooLong(t *testing.T) {
	body := bytes.Repeat([]byte{'z'}, 100)
	r := bytes.NewReader(append(AppendFrame(nil, MsgPublish, body), AppendFrame(nil, MsgError, []byte("next"))...))
	_, _, err := ReadFrame(r, 50)
	tl, ok := errors.AsType[*FrameTooLongError](err)
	if !ok || tl.Len != 101 || tl.Max != 50 || !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadFrame = %v, want a FrameTooLongError of 101 bytes over 50", err)
	}
	if _, err := io.CopyN(io.Discard, r, int64(tl.Len)); err != nil {
		t.Fatal(err)
	}
	if typ, p, err := ReadFrame(r, 50); err != nil || typ != MsgError || string(p) != "next" {
		t.Fatalf("the frame after: %d %q %v", typ, p, err)
	}
}

// Columns, tile by tile, makes what AppendColumn makes rank by rank, at
// sizes that end tiles early, with whole and split addresses of several
// widths.
func TestColumns(t *testing.T) {
	for _, size := range []int{0, 1, 63, 64, 65, 130} {
		addrs := make([]Addr, size)
		for q := range addrs {
			w := q % 4 // 0: whole
			parts := make([]byte, size*w)
			for i := range parts {
				parts[i] = byte(q*31 + i)
			}
			addrs[q] = Addr{Common: fmt.Sprintf("c%d", q), Width: w, Parts: string(parts)}
			if err := addrs[q].Check(q, size); err != nil {
				t.Fatal(err)
			}
		}
		columns := Columns(addrs)
		if len(columns) != size {
			t.Fatalf("%d columns for %d ranks", len(columns), size)
		}
		for r, c := range columns {
			if want := AppendColumn(nil, addrs, r); !bytes.Equal(c, want) {
				t.Fatalf("size %d: column %d is %v, want %v", size, r, c, want)
			}
		}
	}
}

// BenchmarkColumns makes the columns of a job of 4,096 ranks with verbs
// addresses: what ftrun does once, when the last rank publishes.
func BenchmarkColumns(b *testing.B) {
	const size, width = 4096, 6
	addrs := make([]Addr, size)
	parts := strings.Repeat("abcdef", size)
	for q := range addrs {
		addrs[q] = Addr{Common: strings.Repeat("c", 72), Width: width, Parts: parts}
	}
	b.ReportAllocs()
	for b.Loop() {
		Columns(addrs)
	}
}
