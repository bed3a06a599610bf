package window

import (
	"context"
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Op is a reduction for Accumulate, GetAccumulate and FetchAndOp.
type Op int

const (
	// Sum adds the origin value to the target (int64 only).
	Sum Op = iota + 1
	// Replace stores the origin value at the target.
	Replace
	// NoOp leaves the target unchanged (GetAccumulate and FetchAndOp then
	// read it atomically).
	NoOp
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "SUM"
	case Replace:
		return "REPLACE"
	case NoOp:
		return "NO_OP"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Accumulate combines origin into the int64 elements at disp of target's
// window with op (Sum, Replace or NoOp). Each element is updated atomically;
// disp must be a multiple of 8. Complete at the next Flush.
func (w *Window) Accumulate(target ftrma.Rank, disp uint64, origin []int64, op Op) error {
	return w.accumulate("accumulate", target, disp, origin, nil, op)
}

// GetAccumulate is Accumulate that also returns, in result (len(origin)
// elements), the values before the update. Result is valid after Flush, except
// that Replace, which is a swap built from compare-and-swap, completes before
// GetAccumulate returns.
func (w *Window) GetAccumulate(target ftrma.Rank, disp uint64, origin, result []int64, op Op) error {
	if len(result) != len(origin) {
		return &ftrma.OpError{Op: "get-accumulate", Rank: target, Err: fmt.Errorf("%w: result has %d elements for %d", ftrma.ErrInvalid, len(result), len(origin))}
	}
	return w.accumulate("get-accumulate", target, disp, origin, result, op)
}

func (w *Window) accumulate(name string, target ftrma.Rank, disp uint64, origin, result []int64, op Op) error {
	tr, key, off, err := w.target(name, target, disp, 8*len(origin), true)
	if err != nil {
		return err
	}
	switch op {
	case Sum:
		for i, v := range origin {
			var res *uint64
			if result != nil {
				res = (*uint64)(unsafe.Pointer(&result[i]))
			}
			if _, err := w.t.FetchAndAdd64(tr, key, off+8*uint64(i), uint64(v), res); err != nil {
				return wrap(name, target, err)
			}
		}
	case Replace:
		if result == nil {
			_, err := w.writeWords(tr, key, off, int64Bytes(origin))
			return wrap(name, target, err)
		}
		for i, v := range origin {
			old, err := w.swap(tr, key, off+8*uint64(i), uint64(v))
			if err != nil {
				return wrap(name, target, err)
			}
			result[i] = int64(old)
		}
	case NoOp:
		if result != nil {
			_, err := w.readWords(tr, key, off, int64Bytes(result))
			return wrap(name, target, err)
		}
	default:
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: operation %v", ftrma.ErrInvalid, op)}
	}
	return nil
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

// AccumulateBytes stores data at disp of target's window; op must be Replace.
// Aligned 8-byte words are stored atomically (never torn); the whole is not.
func (w *Window) AccumulateBytes(target ftrma.Rank, disp uint64, data []byte, op Op) error {
	const name = "accumulate"
	if op != Replace {
		return &ftrma.OpError{Op: name, Rank: target, Err: fmt.Errorf("%w: %v on bytes (only REPLACE)", ftrma.ErrInvalid, op)}
	}
	tr, key, off, err := w.target(name, target, disp, len(data), false)
	if err != nil {
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

// FetchAndOp applies op (Sum, Replace or NoOp) with operand to the int64 at
// disp of target's window and stores the prior value in *result. Sum and NoOp
// complete at Flush; Replace completes before FetchAndOp returns.
func (w *Window) FetchAndOp(target ftrma.Rank, disp uint64, operand int64, result *int64, op Op) error {
	const name = "fetch-and-op"
	tr, key, off, err := w.target(name, target, disp, 8, true)
	if err != nil {
		return err
	}
	res := (*uint64)(unsafe.Pointer(result))
	switch op {
	case Sum:
		_, err = w.t.FetchAndAdd64(tr, key, off, uint64(operand), res)
	case NoOp:
		_, err = w.t.FetchAndAdd64(tr, key, off, 0, res)
	case Replace:
		var old uint64
		old, err = w.swap(tr, key, off, uint64(operand))
		if err == nil && result != nil {
			*result = int64(old)
		}
	default:
		err = fmt.Errorf("%w: operation %v", ftrma.ErrInvalid, op)
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
