package jobwire

import (
	"encoding/binary"
	"fmt"

	"github.com/ftrma/ftrma"
)

// Spare ranks (ftrun --respawn=S). A job of n ranks with S spares has
// size C = n+S: every rank gets EnvSize=C and EnvSpares=S, and world ranks
// n..C-1 start absent (neither live nor failed). A failed rank stays failed
// for ever; a spare replaces it.
//
// The rendezvous completes when ranks 0..n-1 have published; their address
// lists have an empty entry for every spare. Later, on the supervision
// channel:
//
//	R→L  spawn    SpawnRequest: id uint32, k uint32, payload length uint32,
//	              payload (at most MaxSpawnPayload bytes, opaque to ftrun),
//	              near count uint32 (0 or k), near count × rank uint32:
//	              spare i replaces rank near[i], and ftrun starts it on
//	              that rank's host if it can (a placement hint)
//	L→R  spawned  SpawnAnswer: id uint32 (the request's), count uint32,
//	              count × rank uint32 (the spares started and admitted),
//	              error length uint16, error text ("" when all k started)
//	L→R  admit    Admission: rank uint32, address length uint16, the
//	              spare's address as this rank gets it (Addr.For), payload
//	              length uint32, payload (the spawn request's)
//	L→R  roster   count uint32, count × rank uint32 (RanksPayload)
//
// ftrun serves spawn requests one at a time. For each of the k spares, in
// rank order, it starts the process with EnvSpawn set to the payload
// (standard base64), waits until it has published its address, and sends
// every live rank (other than the spare) an admit. Only then does the
// requester get spawned. A live rank that has not yet taken its supervision
// channel gets the admits it missed when it does, right after its address
// list and before any other frame. A spare whose process ends before it
// published is never admitted, and nobody hears of its exit; one that
// ended after its admit is a failed rank like any other.
//
// A spare joins the rendezvous like the first ranks. Its address list
// holds the address of every live rank (the first ranks and the spares
// admitted before it, none failed so far) and an empty entry for every
// other rank: spares not started, and failed ranks. Right after the list
// comes a roster: the ranks that had failed by then (their exit notices
// follow too, as for any rank). So a spare knows each rank's state when it
// joined: live (an address), failed (on the roster), or absent (neither).
const (
	MaxSpawnPayload = 16 << 10 // largest spawn payload, bytes
	// MaxSuperFrame bounds every frame on the supervision channel after
	// the address list (an admit is the largest).
	MaxSuperFrame = 1 + 4 + 2 + MaxAddr + MaxAddrPart + 4 + MaxSpawnPayload
)

// SpawnRequest asks ftrun for K spare ranks.
type SpawnRequest struct {
	ID      uint32 // chosen by the rank; the answer carries it back
	K       uint32 // how many spares, >= 1
	Payload []byte // handed to every spare (EnvSpawn) and every live rank (Admission)
	// Near is empty, or K ranks: spare i replaces rank Near[i] (failed),
	// and ftrun starts it on that rank's host if it can. A hint only:
	// ftrun places the spare elsewhere when it cannot.
	Near []ftrma.Rank
}

// Append encodes q as a spawn payload.
func (q SpawnRequest) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, q.ID)
	b = binary.BigEndian.AppendUint32(b, q.K)
	b = binary.BigEndian.AppendUint32(b, uint32(len(q.Payload)))
	b = append(b, q.Payload...)
	return AppendRanks(b, q.Near)
}

// ParseSpawn decodes a spawn payload of a job of size ranks. Payload
// aliases p.
func ParseSpawn(p []byte, size int) (SpawnRequest, error) {
	if len(p) < 12 {
		return SpawnRequest{}, fmt.Errorf("%w: spawn request of %d bytes", ErrMalformed, len(p))
	}
	q := SpawnRequest{ID: binary.BigEndian.Uint32(p), K: binary.BigEndian.Uint32(p[4:])}
	n := binary.BigEndian.Uint32(p[8:])
	switch {
	case n > MaxSpawnPayload:
		return SpawnRequest{}, &LimitError{Rank: -1, What: "spawn payload", Size: int(n), Limit: "MaxSpawnPayload", Max: MaxSpawnPayload}
	case uint64(n) > uint64(len(p)-12):
		return SpawnRequest{}, fmt.Errorf("%w: spawn payload of %d bytes in %d", ErrMalformed, n, len(p)-12)
	case q.K < 1:
		return SpawnRequest{}, fmt.Errorf("%w: spawn request for %d ranks", ErrMalformed, q.K)
	}
	q.Payload = p[12 : 12+n]
	near, err := ParseRanks(p[12+n:], size)
	switch {
	case err != nil:
		return SpawnRequest{}, err
	case len(near) != 0 && uint64(len(near)) != uint64(q.K):
		return SpawnRequest{}, fmt.Errorf("%w: spawn request for %d ranks near %d", ErrMalformed, q.K, len(near))
	}
	if len(near) > 0 {
		q.Near = near
	}
	return q, nil
}

// SpawnAnswer is ftrun's answer to a SpawnRequest: the spares it started
// and admitted, in order, and why it stopped short of K ("" when it did
// not).
type SpawnAnswer struct {
	ID    uint32
	Ranks []ftrma.Rank
	Err   string // at most MaxErrorText bytes
}

// Append encodes a as a spawned payload.
func (a SpawnAnswer) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, a.ID)
	b = AppendRanks(b, a.Ranks)
	e := ErrorText(a.Err)
	b = binary.BigEndian.AppendUint16(b, uint16(len(e)))
	return append(b, e...)
}

// ParseSpawned decodes a spawned payload of a job of size ranks.
func ParseSpawned(p []byte, size int) (SpawnAnswer, error) {
	if len(p) < 4 {
		return SpawnAnswer{}, fmt.Errorf("%w: spawn answer of %d bytes", ErrMalformed, len(p))
	}
	a := SpawnAnswer{ID: binary.BigEndian.Uint32(p)}
	ranks, rest, err := parseRanks(p[4:], size)
	if err != nil {
		return SpawnAnswer{}, err
	}
	if len(rest) < 2 {
		return SpawnAnswer{}, fmt.Errorf("%w: spawn answer without its error", ErrMalformed)
	}
	n := int(binary.BigEndian.Uint16(rest))
	if n > MaxErrorText || n != len(rest)-2 {
		return SpawnAnswer{}, fmt.Errorf("%w: spawn answer error of %d bytes in %d", ErrMalformed, n, len(rest)-2)
	}
	a.Ranks, a.Err = ranks, Printable(rest[2:])
	return a, nil
}

// Admission tells a live rank that spare Rank joined.
type Admission struct {
	Rank    ftrma.Rank
	Addr    string // the spare's address as the receiving rank gets it (Addr.For)
	Payload []byte // the spawn request's payload
}

// Append encodes a as an admit payload.
func (a Admission) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(a.Rank))
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.Addr)))
	b = append(b, a.Addr...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.Payload)))
	return append(b, a.Payload...)
}

// ParseAdmit decodes an admit payload of a job of size ranks. Payload
// aliases p.
func ParseAdmit(p []byte, size int) (Admission, error) {
	if len(p) < 6 {
		return Admission{}, fmt.Errorf("%w: admission of %d bytes", ErrMalformed, len(p))
	}
	r, err := ParseRank(p[:4], size)
	if err != nil {
		return Admission{}, err
	}
	l := int(binary.BigEndian.Uint16(p[4:]))
	p = p[6:]
	if l < 1 || l > MaxAddr+MaxAddrPart || l+4 > len(p) {
		return Admission{}, fmt.Errorf("%w: admitted address of %d bytes", ErrMalformed, l)
	}
	a := Admission{Rank: r, Addr: string(p[:l])}
	p = p[l:]
	n := binary.BigEndian.Uint32(p)
	if n > MaxSpawnPayload || uint64(n) != uint64(len(p)-4) {
		return Admission{}, fmt.Errorf("%w: admission payload of %d bytes in %d", ErrMalformed, n, len(p)-4)
	}
	a.Payload = p[4:]
	return a, nil
}

// AppendRanks encodes a list of ranks: count uint32, then each uint32 (the
// roster's payload).
func AppendRanks(b []byte, ranks []ftrma.Rank) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(ranks)))
	for _, r := range ranks {
		b = binary.BigEndian.AppendUint32(b, uint32(r))
	}
	return b
}

// ParseRanks decodes AppendRanks' list of ranks of a job of size ranks,
// with nothing after it.
func ParseRanks(p []byte, size int) ([]ftrma.Rank, error) {
	ranks, rest, err := parseRanks(p, size)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%w: %d bytes after a rank list", ErrMalformed, len(rest))
	}
	return ranks, err
}

func parseRanks(p []byte, size int) ([]ftrma.Rank, []byte, error) {
	if len(p) < 4 {
		return nil, nil, fmt.Errorf("%w: short rank list", ErrMalformed)
	}
	n := binary.BigEndian.Uint32(p)
	p = p[4:]
	if uint64(n) > uint64(size) || uint64(n)*4 > uint64(len(p)) {
		return nil, nil, fmt.Errorf("%w: rank list of %d in %d bytes for %d ranks", ErrMalformed, n, len(p), size)
	}
	ranks := make([]ftrma.Rank, n)
	for i := range ranks {
		r, err := ParseRank(p[:4], size)
		if err != nil {
			return nil, nil, err
		}
		ranks[i], p = r, p[4:]
	}
	return ranks, p, nil
}
