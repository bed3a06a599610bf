package window

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Op is a reduction for Accumulate, GetAccumulate and FetchAndOp: MPI's
// predefined operations. Which element types each takes is listed with the
// constant; an Op used on a type it does not take fails with ftrma.ErrInvalid.
type Op int

// The values of the first three are kept from before the others existed.
const (
	// Sum adds the origin value to the target (int64, uint64: wrapping;
	// float64).
	Sum Op = iota + 1
	// Replace stores the origin value at the target (every type, bytes).
	Replace
	// NoOp leaves the target unchanged; GetAccumulate and FetchAndOp then
	// read it atomically (every type, bytes).
	NoOp
	// Prod multiplies the target by the origin value (int64, uint64:
	// wrapping; float64).
	Prod
	// Min keeps the smaller of the two (int64, uint64, float64).
	Min
	// Max keeps the larger of the two (int64, uint64, float64).
	Max
	// BAnd is bitwise and (int64, uint64).
	BAnd
	// BOr is bitwise or (int64, uint64).
	BOr
	// BXor is bitwise exclusive or (int64, uint64).
	BXor
	// LAnd is logical and: 1 if both are non-zero, else 0 (int64, uint64).
	LAnd
	// LOr is logical or: 1 if either is non-zero, else 0 (int64, uint64).
	LOr
	// LXor is logical exclusive or: 1 if exactly one is non-zero, else 0
	// (int64, uint64).
	LXor
)

// String returns MPI's name of the operation without the MPI_ prefix
// ("SUM", "BXOR", "NO_OP").
func (o Op) String() string {
	switch o {
	case Sum:
		return "SUM"
	case Replace:
		return "REPLACE"
	case NoOp:
		return "NO_OP"
	case Prod:
		return "PROD"
	case Min:
		return "MIN"
	case Max:
		return "MAX"
	case BAnd:
		return "BAND"
	case BOr:
		return "BOR"
	case BXor:
		return "BXOR"
	case LAnd:
		return "LAND"
	case LOr:
		return "LOR"
	case LXor:
		return "LXOR"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Elem is an element type of the typed accumulate operations.
type Elem interface{ int64 | uint64 | float64 }

// Typed gives a window's accumulate operations on elements of type T. The
// methods of Window with the same names are those of Typed[int64].
//
//	window.As[float64](w).Accumulate(0, 0, []float64{2.5}, window.Max)
type Typed[T Elem] struct{ w *Window }

// As returns w's accumulate operations on elements of type T.
func As[T Elem](w *Window) Typed[T] { return Typed[T]{w} }

// elemKind is the type of an accumulate's elements.
type elemKind int

const (
	kindInt64 elemKind = iota
	kindUint64
	kindFloat64
)

func (k elemKind) String() string {
	return [...]string{"int64", "uint64", "float64"}[k]
}

func kindOf[T Elem]() elemKind {
	var z T
	switch any(z).(type) {
	case uint64:
		return kindUint64
	case float64:
		return kindFloat64
	}
	return kindInt64
}

// valid reports whether op applies to elements of kind k.
func valid(op Op, k elemKind) error {
	switch {
	case op < Sum || op > LXor:
		return fmt.Errorf("%w: operation %v", ftrma.ErrInvalid, op)
	case k == kindFloat64 && op >= BAnd:
		return fmt.Errorf("%w: %v on %v", ftrma.ErrInvalid, op, k)
	}
	return nil
}

// apply returns op(old, v) for elements of kind k held as their bits. op
// must be valid for k.
func apply(op Op, k elemKind, old, v uint64) uint64 {
	switch op {
	case Replace:
		return v
	case NoOp:
		return old
	case BAnd:
		return old & v
	case BOr:
		return old | v
	case BXor:
		return old ^ v
	case LAnd:
		return b2u(old != 0 && v != 0)
	case LOr:
		return b2u(old != 0 || v != 0)
	case LXor:
		return b2u((old != 0) != (v != 0))
	}
	switch k {
	case kindFloat64:
		a, b := math.Float64frombits(old), math.Float64frombits(v)
		switch op {
		case Sum:
			return math.Float64bits(a + b)
		case Prod:
			return math.Float64bits(a * b)
		case Min:
			return math.Float64bits(min(a, b))
		case Max:
			return math.Float64bits(max(a, b))
		}
	case kindInt64:
		a, b := int64(old), int64(v)
		switch op {
		case Sum:
			return uint64(a + b)
		case Prod:
			return uint64(a * b)
		case Min:
			return uint64(min(a, b))
		case Max:
			return uint64(max(a, b))
		}
	case kindUint64:
		switch op {
		case Sum:
			return old + v
		case Prod:
			return old * v
		case Min:
			return min(old, v)
		case Max:
			return max(old, v)
		}
	}
	panic(fmt.Sprintf("window: apply: %v on %v", op, k)) // valid rules it out
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// Accumulate combines origin into the elements at disp of target's window
// with op: target[i] = op(target[i], origin[i]). Each element is updated
// atomically, also against other ranks' accumulates on it; disp must be a
// multiple of 8. Sum on integers, Replace and NoOp are posted and complete
// at the next Flush; the other operations are compare-and-swap loops and
// are complete when Accumulate returns.
func (a Typed[T]) Accumulate(target ftrma.Rank, disp uint64, origin []T, op Op) error {
	_, _, err := a.accumulate("accumulate", target, disp, origin, nil, op)
	return err
}

// GetAccumulate is Accumulate that also returns, in result (len(origin)
// elements), the values before this rank's update. For NoOp origin may be
// nil. Result is valid after Flush (Sum on integers and NoOp are posted;
// the other operations are complete when GetAccumulate returns).
func (a Typed[T]) GetAccumulate(target ftrma.Rank, disp uint64, origin, result []T, op Op) error {
	_, _, err := a.getAccumulate("get-accumulate", target, disp, origin, result, op)
	return err
}

// FetchAndOp applies op with operand to the element at disp of target's
// window and stores the prior value in *result (which may be nil). It
// completes as GetAccumulate of one element.
func (a Typed[T]) FetchAndOp(target ftrma.Rank, disp uint64, operand T, result *T, op Op) error {
	const name = "fetch-and-op"
	if k := kindOf[T](); op == Sum && k != kindFloat64 || op == NoOp {
		// One fetch-and-add (of 0 for NoOp), without the slices of the
		// general path: this is the hot call of counters and queues.
		tr, key, off, err := a.w.target(name, target, disp, 8, true)
		if err != nil {
			return err
		}
		v := *(*uint64)(unsafe.Pointer(&operand))
		if op == NoOp {
			v = 0
		}
		_, err = a.w.t.FetchAndAdd64(tr, key, off, v, (*uint64)(unsafe.Pointer(result)))
		return wrap(name, target, err)
	}
	var res []T
	if result != nil {
		res = unsafe.Slice(result, 1)
	}
	_, _, err := a.accumulate(name, target, disp, []T{operand}, res, op)
	return err
}

// Raccumulate is Accumulate returning a request; the request is complete
// when the update is done at the target.
func (a Typed[T]) Raccumulate(target ftrma.Rank, disp uint64, origin []T, op Op) (*Request, error) {
	const name = "raccumulate"
	tr, seq, err := a.accumulate(name, target, disp, origin, nil, op)
	if err != nil {
		return nil, err
	}
	return a.w.newRequest(name, target, tr, seq), nil
}

// RgetAccumulate is GetAccumulate returning a request; result is valid
// once the request is complete.
func (a Typed[T]) RgetAccumulate(target ftrma.Rank, disp uint64, origin, result []T, op Op) (*Request, error) {
	const name = "rget-accumulate"
	tr, seq, err := a.getAccumulate(name, target, disp, origin, result, op)
	if err != nil {
		return nil, err
	}
	return a.w.newRequest(name, target, tr, seq), nil
}

func (a Typed[T]) getAccumulate(name string, target ftrma.Rank, disp uint64, origin, result []T, op Op) (ftrma.Rank, transport.Seq, error) {
	if op == NoOp && origin == nil {
		origin = make([]T, len(result))
	}
	if len(result) != len(origin) {
		return 0, 0, &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: result has %d elements for %d", ftrma.ErrInvalid, len(result), len(origin))}
	}
	if result == nil {
		result = []T{} // non-nil: the result is wanted
	}
	return a.accumulate(name, target, disp, origin, result, op)
}

// accumulate posts or runs op on origin at disp of target (result nil: no
// result wanted) and returns the transport rank and the sequence at which
// it is complete.
func (a Typed[T]) accumulate(name string, target ftrma.Rank, disp uint64, origin, result []T, op Op) (ftrma.Rank, transport.Seq, error) {
	w, k := a.w, kindOf[T]()
	if err := valid(op, k); err != nil {
		return 0, 0, &ftrma.OpError{Op: name, Rank: target, Err: err}
	}
	tr, key, off, err := w.target(name, target, disp, 8*len(origin), true)
	if err != nil {
		return 0, 0, err
	}
	in, out := elemWords(origin), elemWords(result)
	var seq transport.Seq
	switch {
	case op == Sum && k != kindFloat64:
		for i, v := range in {
			var res *uint64
			if out != nil {
				res = &out[i]
			}
			if seq, err = w.t.FetchAndAdd64(tr, key, off+8*uint64(i), v, res); err != nil {
				break
			}
		}
	case op == NoOp:
		if out != nil && len(out) > 0 {
			seq, err = w.readWords(tr, key, off, wordBytes(out))
		}
	case op == Replace && out == nil:
		seq, err = w.writeWords(tr, key, off, wordBytes(in))
	default:
		seq, err = w.casLoop(tr, key, off, in, out, op, k)
	}
	return tr, seq, wrap(name, target, err)
}

// elemWords views elements as their bits; nil stays nil.
func elemWords[T Elem](v []T) []uint64 {
	if v == nil {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(v))), len(v))
}

// casLoop applies op with in[i] to every element at off by compare-and-swap,
// and stores each element's prior value in out (if not nil). It reads the
// elements as first guesses (a guess may be torn or stale: its swap then
// fails and returns the true value), posts a swap per element, waits, and
// posts again for the elements whose guess was wrong, with the value the
// swap found. The swaps of one round are in flight together. It returns
// when every element is updated, with the last sequence used.
func (w *Window) casLoop(tr ftrma.Rank, key transport.Key, off uint64, in, out []uint64, op Op, k elemKind) (transport.Seq, error) {
	if len(in) == 0 {
		return 0, nil
	}
	guess := make([]uint64, 2*len(in))
	found := guess[len(in):]
	guess = guess[:len(in)]
	seq, err := w.t.Read(tr, key, off, wordBytes(guess))
	if err == nil {
		err = w.t.Wait(context.Background(), tr, seq)
	}
	if err != nil {
		return 0, err
	}
	pending := make([]int, len(in))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		for _, i := range pending {
			v := apply(op, k, guess[i], in[i])
			if seq, err = w.t.CompareAndSwap64(tr, key, off+8*uint64(i), guess[i], v, &found[i]); err != nil {
				return 0, err
			}
		}
		if err := w.t.Wait(context.Background(), tr, seq); err != nil {
			return 0, err
		}
		next := pending[:0]
		for _, i := range pending {
			if found[i] != guess[i] {
				guess[i] = found[i]
				next = append(next, i)
			} else if out != nil {
				out[i] = found[i]
			}
		}
		pending = next
	}
	return seq, nil
}

// Accumulate is As[int64](w).Accumulate: see Typed.Accumulate.
func (w *Window) Accumulate(target ftrma.Rank, disp uint64, origin []int64, op Op) error {
	return As[int64](w).Accumulate(target, disp, origin, op)
}

// GetAccumulate is As[int64](w).GetAccumulate: see Typed.GetAccumulate.
func (w *Window) GetAccumulate(target ftrma.Rank, disp uint64, origin, result []int64, op Op) error {
	return As[int64](w).GetAccumulate(target, disp, origin, result, op)
}

// FetchAndOp is As[int64](w).FetchAndOp: see Typed.FetchAndOp.
func (w *Window) FetchAndOp(target ftrma.Rank, disp uint64, operand int64, result *int64, op Op) error {
	return As[int64](w).FetchAndOp(target, disp, operand, result, op)
}

// Raccumulate is As[int64](w).Raccumulate: see Typed.Raccumulate.
func (w *Window) Raccumulate(target ftrma.Rank, disp uint64, origin []int64, op Op) (*Request, error) {
	return As[int64](w).Raccumulate(target, disp, origin, op)
}

// RgetAccumulate is As[int64](w).RgetAccumulate: see Typed.RgetAccumulate.
func (w *Window) RgetAccumulate(target ftrma.Rank, disp uint64, origin, result []int64, op Op) (*Request, error) {
	return As[int64](w).RgetAccumulate(target, disp, origin, result, op)
}

// writeWords writes b in pieces the transport stores in whole aligned words,
// so that every element is replaced atomically. On a transport without
// CapWholeWords the aligned words are swapped in one at a time with
// compare-and-swap (each waits for its round trip); bytes outside them are
// written.
func (w *Window) writeWords(tr ftrma.Rank, key transport.Key, off uint64, b []byte) (transport.Seq, error) {
	if !w.WholeWords() {
		return w.swapWords(tr, key, off, b)
	}
	var seq transport.Seq
	for first := true; first || len(b) > 0; first = false {
		n := min(len(b), transport.WordAtomicWrite)
		var err error
		if seq, err = w.t.Write(tr, key, off, b[:n]); err != nil {
			return 0, err
		}
		b, off = b[n:], off+uint64(n)
	}
	return seq, nil
}

// swapWords stores b at off with a swap per aligned 8-byte word and a write
// for the bytes before the first and after the last.
func (w *Window) swapWords(tr ftrma.Rank, key transport.Key, off uint64, b []byte) (transport.Seq, error) {
	head := int((8 - off%8) % 8)
	if head >= len(b) {
		return w.t.Write(tr, key, off, b)
	}
	var seq transport.Seq
	var err error
	if head > 0 {
		if seq, err = w.t.Write(tr, key, off, b[:head]); err != nil {
			return 0, err
		}
	}
	i := head
	for ; i+8 <= len(b); i += 8 {
		if _, err := w.swap(tr, key, off+uint64(i), binary.NativeEndian.Uint64(b[i:])); err != nil {
			return 0, err
		}
	}
	if i < len(b) {
		return w.t.Write(tr, key, off+uint64(i), b[i:])
	}
	return seq, nil
}

// readWords reads len(b) bytes at off into b so that every aligned 8-byte
// word is read whole: one Read on a transport with CapWholeWords, else a
// fetch-and-add of zero per aligned word and a Read of the bytes around
// them. Complete at the returned sequence.
func (w *Window) readWords(tr ftrma.Rank, key transport.Key, off uint64, b []byte) (transport.Seq, error) {
	if w.WholeWords() || len(b) > transport.WordAtomicWrite {
		return w.t.Read(tr, key, off, b)
	}
	head := min(int((8-off%8)%8), len(b))
	var seq transport.Seq
	var err error
	if head > 0 {
		if seq, err = w.t.Read(tr, key, off, b[:head]); err != nil {
			return 0, err
		}
	}
	i := head
	for ; i+8 <= len(b); i += 8 {
		if seq, err = w.t.FetchAndAdd64(tr, key, off+uint64(i), 0, (*uint64)(unsafe.Pointer(&b[i]))); err != nil {
			return 0, err
		}
	}
	if i < len(b) {
		return w.t.Read(tr, key, off+uint64(i), b[i:])
	}
	return seq, nil
}

// WholeWords reports whether Put, Get and the byte accumulates store and load
// aligned 8-byte words whole on this window's transport. When not (RDMA
// devices), Accumulate and GetAccumulate still treat every element atomically
// (through the device's atomics), but a Get concurrent with a Put or an
// Accumulate to the same place may see a torn word, as MPI allows.
func (w *Window) WholeWords() bool { return w.t.Caps().Has(transport.CapWholeWords) }

// swap atomically replaces the word at off with v and returns the old value,
// by compare-and-swap until one succeeds. It waits for each round trip.
func (w *Window) swap(tr ftrma.Rank, key transport.Key, off uint64, v uint64) (uint64, error) {
	var guess uint64
	for {
		var old uint64
		seq, err := w.t.CompareAndSwap64(tr, key, off, guess, v, &old)
		if err != nil {
			return 0, err
		}
		if err := w.t.Wait(context.Background(), tr, seq); err != nil {
			return 0, err
		}
		if old == guess {
			return old, nil
		}
		guess = old
	}
}

// AccumulateBytes stores data at disp of target's window (Replace) or
// leaves it unchanged (NoOp); other operations fail with ftrma.ErrInvalid.
// Aligned 8-byte words are stored atomically (never torn); the whole is not.
// Complete at the next Flush.
func (w *Window) AccumulateBytes(target ftrma.Rank, disp uint64, data []byte, op Op) error {
	const name = "accumulate"
	if op != Replace && op != NoOp {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: %v on bytes (only REPLACE, NO_OP)", ftrma.ErrInvalid, op)}
	}
	tr, key, off, err := w.target(name, target, disp, len(data), false)
	if err != nil || op == NoOp {
		return err
	}
	_, err = w.writeWords(tr, key, off, data)
	return wrap(name, target, err)
}

// GetAccumulateBytes reads len(data) bytes at disp into result, then, for
// Replace, stores data there; NoOp only reads. The read precedes the store at
// the target; aligned words are read and stored whole. Complete at Flush.
func (w *Window) GetAccumulateBytes(target ftrma.Rank, disp uint64, data, result []byte, op Op) error {
	const name = "get-accumulate"
	if len(result) != len(data) {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: result of %d bytes for %d", ftrma.ErrInvalid, len(result), len(data))}
	}
	if op != Replace && op != NoOp {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: %v on bytes (only REPLACE, NO_OP)", ftrma.ErrInvalid, op)}
	}
	tr, key, off, err := w.target(name, target, disp, len(data), false)
	if err != nil {
		return err
	}
	if _, err := w.readWords(tr, key, off, result); err != nil {
		return wrap(name, target, err)
	}
	if op == Replace {
		_, err = w.writeWords(tr, key, off, data)
	}
	return wrap(name, target, err)
}

// CompareAndSwap replaces the int64 at disp of target's window with swap if it
// equals compare, and stores the prior value in *result (valid after Flush).
func (w *Window) CompareAndSwap(target ftrma.Rank, disp uint64, compare, swap int64, result *int64) error {
	const name = "compare-and-swap"
	tr, key, off, err := w.target(name, target, disp, 8, true)
	if err != nil {
		return err
	}
	_, err = w.t.CompareAndSwap64(tr, key, off, uint64(compare), uint64(swap), (*uint64)(unsafe.Pointer(result)))
	return wrap(name, target, err)
}
