package jobwire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/ftrma/ftrma"
)

func TestSpawnRoundTrip(t *testing.T) {
	q := SpawnRequest{ID: 7, K: 2, Payload: []byte("replaces 3")}
	got, err := ParseSpawn(q.Append(nil), 6)
	if err != nil || got.ID != 7 || got.K != 2 || !bytes.Equal(got.Payload, q.Payload) || got.Near != nil {
		t.Fatalf("ParseSpawn = %+v, %v; want %+v", got, err, q)
	}
	q.Near = []ftrma.Rank{3, 1}
	got, err = ParseSpawn(q.Append(nil), 6)
	if err != nil || got.ID != 7 || got.K != 2 || !bytes.Equal(got.Payload, q.Payload) || !reflect.DeepEqual(got.Near, q.Near) {
		t.Fatalf("ParseSpawn with near = %+v, %v; want %+v", got, err, q)
	}
	for _, a := range []SpawnAnswer{
		{ID: 7, Ranks: []ftrma.Rank{4, 5}},
		{ID: 8, Ranks: []ftrma.Rank{4}, Err: "spare rank 5 exited with status 3 before it joined"},
		{ID: 9, Ranks: []ftrma.Rank{}, Err: "no spares left"},
	} {
		got, err := ParseSpawned(a.Append(nil), 6)
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Errorf("ParseSpawned = %+v, %v; want %+v", got, err, a)
		}
	}
	adm := Admission{Rank: 5, Addr: "127.0.0.1:4000", Payload: []byte("x")}
	if got, err := ParseAdmit(adm.Append(nil), 6); err != nil || !reflect.DeepEqual(got, adm) {
		t.Errorf("ParseAdmit = %+v, %v; want %+v", got, err, adm)
	}
	if got, err := ParseRanks(AppendRanks(nil, []ftrma.Rank{1, 3}), 4); err != nil || !reflect.DeepEqual(got, []ftrma.Rank{1, 3}) {
		t.Errorf("ParseRanks = %v, %v", got, err)
	}
	if n := len(AppendFrame(nil, MsgAdmit, Admission{Rank: 1, Addr: string(make([]byte, MaxAddr+MaxAddrPart)), Payload: make([]byte, MaxSpawnPayload)}.Append(nil))) - 4; n > MaxSuperFrame {
		t.Errorf("the largest admit frame is %d bytes, over MaxSuperFrame %d", n, MaxSuperFrame)
	}
}

// Bytes from the network never panic the parsers: every truncation of a
// valid message, and a few lies, are errors.
func TestSpawnParseRejects(t *testing.T) {
	valid := map[string][]byte{
		"spawn":   SpawnRequest{ID: 1, K: 1, Payload: []byte("ab")}.Append(nil),
		"near":    SpawnRequest{ID: 1, K: 1, Payload: []byte("ab"), Near: []ftrma.Rank{2}}.Append(nil),
		"spawned": SpawnAnswer{ID: 1, Ranks: []ftrma.Rank{2}, Err: "e"}.Append(nil),
		"admit":   Admission{Rank: 2, Addr: "a", Payload: []byte("p")}.Append(nil),
		"ranks":   AppendRanks(nil, []ftrma.Rank{2}),
	}
	parse := map[string]func([]byte) error{
		"spawn":   func(p []byte) error { _, err := ParseSpawn(p, 3); return err },
		"near":    func(p []byte) error { _, err := ParseSpawn(p, 3); return err },
		"spawned": func(p []byte) error { _, err := ParseSpawned(p, 3); return err },
		"admit":   func(p []byte) error { _, err := ParseAdmit(p, 3); return err },
		"ranks":   func(p []byte) error { _, err := ParseRanks(p, 3); return err },
	}
	for name, p := range valid {
		for n := range len(p) {
			if err := parse[name](p[:n]); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s cut to %d bytes: %v, want ErrMalformed", name, n, err)
			}
		}
		if err := parse[name](append(p, 0)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s with a trailing byte: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := ParseSpawn(SpawnRequest{ID: 1, K: 0}.Append(nil), 3); !errors.Is(err, ErrMalformed) {
		t.Errorf("spawn of 0 ranks: %v, want ErrMalformed", err)
	}
	if _, err := ParseSpawn(SpawnRequest{ID: 1, K: 2, Near: []ftrma.Rank{1}}.Append(nil), 3); !errors.Is(err, ErrMalformed) {
		t.Errorf("spawn of 2 ranks near 1: %v, want ErrMalformed", err)
	}
	if _, err := ParseSpawn(SpawnRequest{ID: 1, K: 1, Near: []ftrma.Rank{3}}.Append(nil), 3); !errors.Is(err, ErrMalformed) {
		t.Errorf("spawn near rank 3 of 3: %v, want ErrMalformed", err)
	}
	if _, err := ParseSpawn(SpawnRequest{ID: 1, K: 1, Payload: make([]byte, MaxSpawnPayload+1)}.Append(nil), 3); !errors.Is(err, ErrTooLarge) {
		t.Errorf("spawn payload over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := ParseAdmit(Admission{Rank: 3, Addr: "a"}.Append(nil), 3); !errors.Is(err, ErrMalformed) {
		t.Errorf("admission of rank 3 of 3: %v, want ErrMalformed", err)
	}
	if _, err := ParseRanks(AppendRanks(nil, []ftrma.Rank{0, 1, 2, 0}), 3); !errors.Is(err, ErrMalformed) {
		t.Errorf("rank list longer than the job: %v, want ErrMalformed", err)
	}
}

// An address list may leave out ranks that are not live: their entry is
// empty, and they get no part.
func TestAddrsWithAbsentRanks(t *testing.T) {
	addrs := []Addr{WholeAddr("a0"), {}, {Common: "c2", Width: 1, Parts: "xyz"}}
	got, err := ParseAddrs(AppendAddrs(nil, addrs, 2))
	if want := []string{"a0", "", "c2z"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseAddrs = %q, %v; want %q", got, err, want)
	}
	col := AppendPartColumn(AppendCommons(nil, addrs), []string{"", "", "z"})
	if got2, err := ParseAddrs(col); err != nil || !reflect.DeepEqual(got2, got) {
		t.Errorf("with AppendPartColumn: %q, %v; want %q", got2, err, got)
	}
	// An empty entry with a part is malformed.
	bad := AppendPartColumn(AppendCommons(nil, addrs), []string{"", "q", "z"})
	if _, err := ParseAddrs(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("a part for an empty entry: %v, want ErrMalformed", err)
	}
}
