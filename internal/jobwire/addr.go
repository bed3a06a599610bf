package jobwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/ftrma/ftrma"
)

// Addr is a rank's transport address as it publishes it: a common part,
// which every rank gets, and optionally one part for each rank of the job,
// all Width bytes long. Rank q gets Common followed by Part(q), the address
// as q needs it (For). A transport whose address is the same for every peer
// publishes it whole (WholeAddr), without parts.
//
// The split is what lets the exchange scale: a verbs address carries the
// number of one queue pair per peer, so whole it is O(size) bytes and the
// list of all of them O(size²) bytes for every rank to download; split, a
// rank downloads every common part and only its own part of each address,
// O(size) bytes.
type Addr struct {
	Common string // 1..MaxAddr bytes
	Width  int    // bytes of each part, 0..MaxAddrPart; 0: no parts
	Parts  string // size × Width bytes: rank q's part is Parts[q*Width : (q+1)*Width]
}

// WholeAddr is an address that every rank gets whole.
func WholeAddr(a string) Addr { return Addr{Common: a} }

// SplitAddr is an address made of common and parts[q] for each rank q; the
// parts must all have one length.
func SplitAddr(common string, parts []string) (Addr, error) {
	if len(parts) == 0 {
		return WholeAddr(common), nil
	}
	w := len(parts[0])
	var b strings.Builder
	b.Grow(len(parts) * w)
	for q, p := range parts {
		if len(p) != w {
			return Addr{}, fmt.Errorf("jobwire: address part for rank %d of %d bytes, rank 0's of %d: %w", q, len(p), w, ftrma.ErrInvalid)
		}
		b.WriteString(p)
	}
	return Addr{Common: common, Width: w, Parts: b.String()}, nil
}

// Part is the part of a for rank q ("" without parts).
func (a Addr) Part(q int) string {
	if a.Width == 0 {
		return ""
	}
	return a.Parts[q*a.Width : (q+1)*a.Width]
}

// For is a as rank q gets it: Common followed by Part(q).
func (a Addr) For(q int) string { return a.Common + a.Part(q) }

// Check checks that a is a well-formed address of rank of a job of size
// ranks within the limits; a size over a limit is a *LimitError naming it.
func (a Addr) Check(rank, size int) error {
	what := "transport address"
	if a.Width > 0 {
		what = "common part of its transport address"
	}
	switch {
	case len(a.Common) < 1:
		return fmt.Errorf("rank %d: empty transport address: %w", rank, ftrma.ErrInvalid)
	case len(a.Common) > MaxAddr:
		return &LimitError{Rank: rank, What: what, Size: len(a.Common), Limit: "MaxAddr", Max: MaxAddr}
	case a.Width > MaxAddrPart:
		return &LimitError{Rank: rank, What: "per-rank part of its transport address", Size: a.Width, Limit: "MaxAddrPart", Max: MaxAddrPart}
	case a.Width < 0 || len(a.Parts) != size*a.Width:
		return fmt.Errorf("rank %d: address parts of %d bytes for %d ranks of %d bytes: %w", rank, len(a.Parts), size, a.Width, ftrma.ErrInvalid)
	}
	return nil
}

// MaxPublish is the largest publish frame (its type and payload, as
// ReadFrame bounds it) of a job of size ranks.
func MaxPublish(size int) int { return 1 + 2 + MaxAddr + 1 + size*MaxAddrPart }

// Append encodes a as a publish payload.
func (a Addr) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.Common)))
	b = append(b, a.Common...)
	b = append(b, byte(a.Width))
	return append(b, a.Parts...)
}

// ParsePublish decodes the publish payload of rank of a job of size ranks
// and checks it (Check). Its errors name the rank.
func ParsePublish(p []byte, rank, size int) (Addr, error) {
	if len(p) < 2 {
		return Addr{}, fmt.Errorf("rank %d: %w: publish of %d bytes", rank, ErrMalformed, len(p))
	}
	l := int(binary.BigEndian.Uint16(p))
	p = p[2:]
	if l > len(p)-1 {
		return Addr{}, fmt.Errorf("rank %d: %w: address of %d bytes in a publish of %d", rank, ErrMalformed, l, len(p)+2)
	}
	a := Addr{Common: string(p[:l]), Width: int(p[l])}
	p = p[l+1:]
	if a.Width <= MaxAddrPart && len(p) != size*a.Width {
		return Addr{}, fmt.Errorf("rank %d: %w: address parts of %d bytes for %d ranks of %d bytes", rank, ErrMalformed, len(p), size, a.Width)
	}
	a.Parts = string(p)
	if err := a.Check(rank, size); err != nil {
		return Addr{}, err
	}
	return a, nil
}

// The addrs payload for rank r is AppendCommons followed by AppendColumn for
// r: the first half is the same for every rank, so the launcher encodes it
// once.

// AppendCommons encodes the first half of the addrs payload: the number of
// ranks and every rank's common part.
func AppendCommons(b []byte, addrs []Addr) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(addrs)))
	for _, a := range addrs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(a.Common)))
		b = append(b, a.Common...)
	}
	return b
}

// AppendColumn encodes the second half of rank r's addrs payload: each
// rank's part for r. Every address must pass Check.
func AppendColumn(b []byte, addrs []Addr, r int) []byte {
	for _, a := range addrs {
		b = append(b, byte(a.Width))
		b = append(b, a.Part(r)...)
	}
	return b
}

// Columns encodes the second half of every rank's addrs payload:
// columns[r] is AppendColumn's for r (every address must pass Check). It
// copies the parts tile by tile:
// picking one rank's part out of every address in turn touches a cache line
// (and a page) per address, which for 4,096 ranks' columns costs seconds.
func Columns(addrs []Addr) [][]byte {
	n := len(addrs)
	off := make([]int, n+1) // off[q]: where rank q's entry starts in a column
	for q, a := range addrs {
		off[q+1] = off[q] + 1 + a.Width
	}
	columns := make([][]byte, n)
	for r := range columns {
		columns[r] = make([]byte, off[n])
	}
	const tile = 64
	for q0 := 0; q0 < n; q0 += tile {
		for r0 := 0; r0 < n; r0 += tile {
			for q := q0; q < min(q0+tile, n); q++ {
				a := addrs[q]
				for r := r0; r < min(r0+tile, n); r++ {
					e := columns[r][off[q]:off[q+1]]
					e[0] = byte(a.Width)
					copy(e[1:], a.Parts[r*a.Width:])
				}
			}
		}
	}
	return columns
}

// AppendPartColumn encodes the second half of an addrs payload from the
// parts themselves: parts[q] is rank q's part for the receiving rank, ""
// for none. Each part is at most MaxAddrPart bytes.
func AppendPartColumn(b []byte, parts []string) []byte {
	for _, p := range parts {
		b = append(b, byte(len(p)))
		b = append(b, p...)
	}
	return b
}

// AppendAddrs encodes the addrs payload for rank r.
func AppendAddrs(b []byte, addrs []Addr, r int) []byte {
	return AppendColumn(AppendCommons(b, addrs), addrs, r)
}

// AddrsLen is the length of the addrs payload, the same for every rank.
func AddrsLen(addrs []Addr) int {
	n := 4
	for _, a := range addrs {
		n += 2 + len(a.Common) + 1 + a.Width
	}
	return n
}

// ParseAddrs decodes an addrs payload into every rank's address as this rank
// gets it (Addr.For); "" for a rank that is not live (a spare not started,
// or in a spare's list a rank that failed: see spawn.go).
func ParseAddrs(p []byte) ([]string, error) {
	commons, parts, err := parseAddrs(p)
	if err != nil {
		return nil, err
	}
	// One string holds them all.
	n := 0
	for q := range commons {
		n += len(commons[q]) + len(parts[q])
	}
	var b strings.Builder
	b.Grow(n)
	for q := range commons {
		b.Write(commons[q])
		b.Write(parts[q])
	}
	all := b.String()
	addrs := make([]string, len(commons))
	for q := range commons {
		n := len(commons[q]) + len(parts[q])
		addrs[q], all = all[:n], all[n:]
	}
	return addrs, nil
}

// parseAddrs decodes an addrs payload into its halves, which alias p.
func parseAddrs(p []byte) (commons, parts [][]byte, err error) {
	if len(p) < 4 {
		return nil, nil, fmt.Errorf("%w: short address list", ErrMalformed)
	}
	n := binary.BigEndian.Uint32(p)
	p = p[4:]
	if uint64(n) > uint64(len(p))/4 { // each entry takes at least 2+1+1 bytes
		return nil, nil, fmt.Errorf("%w: address list claims %d entries in %d bytes", ErrMalformed, n, len(p))
	}
	commons = make([][]byte, n)
	for i := range commons {
		if len(p) < 2 {
			return nil, nil, fmt.Errorf("%w: truncated address list", ErrMalformed)
		}
		l := int(binary.BigEndian.Uint16(p))
		p = p[2:]
		if l > MaxAddr || l > len(p) { // 0: a rank not live (spawn.go)
			return nil, nil, fmt.Errorf("%w: address %d of %d bytes", ErrMalformed, i, l)
		}
		commons[i] = p[:l]
		p = p[l:]
	}
	parts = make([][]byte, n)
	for i := range parts {
		if len(p) < 1 {
			return nil, nil, fmt.Errorf("%w: truncated address list", ErrMalformed)
		}
		l := int(p[0])
		p = p[1:]
		if l > MaxAddrPart || l > len(p) || l > 0 && len(commons[i]) == 0 {
			return nil, nil, fmt.Errorf("%w: part of address %d of %d bytes", ErrMalformed, i, l)
		}
		parts[i] = p[:l]
		p = p[l:]
	}
	if len(p) != 0 {
		return nil, nil, fmt.Errorf("%w: %d trailing bytes after address list", ErrMalformed, len(p))
	}
	return commons, parts, nil
}

// ErrTooLarge is wrapped by every error about a size over one of the limits
// of the wire format (*LimitError, *FrameTooLongError).
var ErrTooLarge = errors.New("over a rendezvous size limit")

// LimitError is a size over one of the limits of the wire format: what,
// whose, how large, and which limit.
type LimitError struct {
	Rank  int    // whose address it is; -1 when it is not one rank's
	What  string // what is too large: "transport address"
	Size  int    // its size, bytes
	Limit string // the name of the limit in this package: "MaxAddr"
	Max   int    // the limit, bytes
	Note  string // more about it, or ""
}

func (e *LimitError) Error() string {
	s := fmt.Sprintf("%s of %d bytes is over the rendezvous limit jobwire.%s = %d bytes", e.What, e.Size, e.Limit, e.Max)
	if e.Rank >= 0 {
		s = fmt.Sprintf("rank %d: %s", e.Rank, s)
	}
	if e.Note != "" {
		s += " (" + e.Note + ")"
	}
	return s
}

func (e *LimitError) Unwrap() error { return ErrTooLarge }

// FrameTooLongError is ReadFrame's error for a frame longer than it may be.
// The frame's bytes are left unread: a server can answer, then read them
// away before it closes, so that its peer reads the answer rather than a
// connection reset.
type FrameTooLongError struct {
	Len int // the frame's length (its type and payload), bytes
	Max int // ReadFrame's bound
}

func (e *FrameTooLongError) Error() string {
	return fmt.Sprintf("%v: frame length %d not in [1, %d]", ErrMalformed, e.Len, e.Max)
}

func (e *FrameTooLongError) Unwrap() []error { return []error{ErrMalformed, ErrTooLarge} }
