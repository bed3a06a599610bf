package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/ftrma/ftrma"
)

// This file holds the reductions: every rank contributes a vector of the
// same length, and the root folds them into one, in rank order (rank 0's
// vector, then rank 1's folded into it, and so on), so that a float sum
// comes out the same whatever the timing. The contributions go straight to
// the root; Allreduce's root (rank 0) then sends the result, or the reason
// it has none, to every rank. A rank thus waits only for ranks it can see
// fail: the root for every contribution, the others for the root.

// ReduceFunc folds in into acc, element by element (acc[i] = acc[i] op
// in[i]). acc and in have the same length; the function must not keep
// either slice. It runs at the root, once per contribution but the first,
// in rank order.
type ReduceFunc func(acc, in []byte)

// MaxReducePayload is the largest contribution of one rank to ReduceBytes
// and AllreduceBytes.
const MaxReducePayload = MaxCollectivePayload - 1

// The first byte of the answer Allreduce's root sends every rank.
const (
	reduceOK        byte = iota // the result follows
	reduceFailed                // a rank failed; its rank follows (4 bytes)
	reduceRevoked               // the communicator was revoked
	reduceInvalid               // contributions of different lengths; the rank follows
	reduceAbandoned             // the root gave up: its context ended or it closed
)

// errAbandoned reports that Allreduce's root gave up before it had a result.
var errAbandoned = errors.New("the root gave up (its context ended or it closed)")

// ReduceBytes folds every rank's contribution mine with fn, in rank order,
// and returns the result at root (MPI_Reduce); the other ranks get nil
// once their contribution is sent. Every rank passes a contribution of the
// same length, at most MaxReducePayload bytes. At the root it fails with an
// error wrapping ftrma.ErrProcFailed when a rank is lost before its
// contribution arrives, ftrma.ErrInvalid when the lengths differ, and
// ftrma.ErrRevoked once the communicator is revoked; elsewhere with
// ftrma.ErrProcFailed when the root is known failed. It honours ctx.
func (c *Comm) ReduceBytes(ctx context.Context, root ftrma.Rank, mine []byte, fn ReduceFunc) ([]byte, error) {
	if fn == nil {
		return nil, &ftrma.OpError{Op: "reduce", Rank: -1, Err: fmt.Errorf("%w: nil ReduceFunc", ftrma.ErrInvalid)}
	}
	return c.reduce(ctx, "reduce", root, mine, func(acc, in []byte) error { fn(acc, in); return nil }, false)
}

// AllreduceBytes folds every rank's contribution mine with fn, in rank
// order, and returns the same result at every rank (MPI_Allreduce). Every
// rank passes a contribution of the same length, at most MaxReducePayload
// bytes. It fails at every rank with an error wrapping
// ftrma.ErrProcFailed when a rank is lost before its contribution reaches
// rank 0 or before rank 0's answer arrives, ftrma.ErrInvalid when the
// lengths differ, ftrma.ErrRevoked once the communicator is revoked, or
// ctx's error. A rank that fails does not hang: it waits for rank 0 only,
// and rank 0 answers with the error it met.
func (c *Comm) AllreduceBytes(ctx context.Context, mine []byte, fn ReduceFunc) ([]byte, error) {
	if fn == nil {
		return nil, &ftrma.OpError{Op: "allreduce", Rank: -1, Err: fmt.Errorf("%w: nil ReduceFunc", ftrma.ErrInvalid)}
	}
	return c.reduce(ctx, "allreduce", 0, mine, func(acc, in []byte) error { fn(acc, in); return nil }, true)
}

// reduce is one round of Reduce (all false) or Allreduce (all true) toward
// root. fold may refuse a contribution with an error wrapping
// ftrma.ErrInvalid.
func (c *Comm) reduce(ctx context.Context, op string, root ftrma.Rank, mine []byte, fold func(acc, in []byte) error, all bool) ([]byte, error) {
	if root < 0 || int(root) >= len(c.members) {
		return nil, &ftrma.OpError{Op: op, Rank: root, Err: ftrma.ErrRankOutOfRange}
	}
	if len(mine) > MaxReducePayload {
		return nil, &ftrma.OpError{Op: op, Rank: -1, Err: fmt.Errorf("%w: contribution of %d bytes exceeds %d", ftrma.ErrInvalid, len(mine), MaxReducePayload)}
	}
	if err := c.awaitLease(ctx, op); err != nil {
		return nil, err
	}
	seq, err := c.begin(op)
	if err != nil {
		return nil, err
	}
	if c.rank != root {
		if err := c.send(op, root, seq, mine); err != nil {
			return nil, err
		}
		if !all {
			return nil, nil
		}
		got, err := c.await(ctx, op, seq, []ftrma.Rank{root})
		if err != nil {
			return nil, err
		}
		return readAnswer(op, root, got[0])
	}
	others := c.others()
	got, err := c.await(ctx, op, seq, others)
	var acc []byte
	if err == nil {
		contrib := make([][]byte, len(c.members))
		contrib[c.rank] = mine
		for i, r := range others {
			contrib[r] = got[i]
		}
		acc, err = foldAll(op, contrib, fold)
	}
	if all {
		answer := makeAnswer(acc, err)
		for _, r := range others {
			c.send(op, r, seq, answer) // a dead rank needs no answer
		}
	}
	return acc, err
}

// foldAll folds contributions in rank order into a new slice.
func foldAll(op string, contrib [][]byte, fold func(acc, in []byte) error) ([]byte, error) {
	for r, b := range contrib {
		if len(b) != len(contrib[0]) {
			return nil, &ftrma.OpError{Op: op, Rank: ftrma.Rank(r), Err: fmt.Errorf("%w: contribution of %d bytes, rank 0's has %d", ftrma.ErrInvalid, len(b), len(contrib[0]))}
		}
	}
	acc := slices.Clone(contrib[0])
	if acc == nil {
		acc = []byte{}
	}
	for r := 1; r < len(contrib); r++ {
		if err := fold(acc, contrib[r]); err != nil {
			return nil, &ftrma.OpError{Op: op, Rank: ftrma.Rank(r), Err: err}
		}
	}
	return acc, nil
}

// makeAnswer is what Allreduce's root sends the other ranks.
func makeAnswer(acc []byte, err error) []byte {
	if err == nil {
		return append([]byte{reduceOK}, acc...)
	}
	var oe *ftrma.OpError
	rank := ftrma.Rank(-1)
	if errors.As(err, &oe) {
		rank = oe.Rank
	}
	switch {
	case errors.Is(err, ftrma.ErrProcFailed):
		return be.AppendUint32([]byte{reduceFailed}, uint32(rank))
	case errors.Is(err, ftrma.ErrRevoked):
		return []byte{reduceRevoked}
	case errors.Is(err, ftrma.ErrInvalid):
		return be.AppendUint32([]byte{reduceInvalid}, uint32(rank))
	}
	return []byte{reduceAbandoned}
}

// readAnswer turns the root's answer into the result or the error.
func readAnswer(op string, root ftrma.Rank, b []byte) ([]byte, error) {
	rankOf := func() ftrma.Rank {
		if len(b) < 5 {
			return -1
		}
		return ftrma.Rank(int32(be.Uint32(b[1:])))
	}
	if len(b) == 0 {
		return nil, &ftrma.OpError{Op: op, Rank: root, Err: fmt.Errorf("%w: empty answer from the root", ftrma.ErrInvalid)}
	}
	switch b[0] {
	case reduceOK:
		return b[1:], nil
	case reduceFailed:
		return nil, &ftrma.OpError{Op: op, Rank: rankOf(), Err: ftrma.ErrProcFailed}
	case reduceRevoked:
		return nil, &ftrma.OpError{Op: op, Rank: -1, Err: ftrma.ErrRevoked}
	case reduceInvalid:
		return nil, &ftrma.OpError{Op: op, Rank: rankOf(), Err: fmt.Errorf("%w: contributions of different lengths", ftrma.ErrInvalid)}
	}
	return nil, &ftrma.OpError{Op: op, Rank: root, Err: errAbandoned}
}

// Op is a reduction operation of Allreduce and Reduce.
type Op int

// The reduction operations. Min and Max of float64 follow Go's min and
// max: a NaN anywhere gives NaN.
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "Sum"
	case Prod:
		return "Prod"
	case Min:
		return "Min"
	case Max:
		return "Max"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Number is an element type of Allreduce and Reduce.
type Number interface {
	int64 | uint64 | float64
}

// reduceChunk is the number of elements one round of Allreduce or Reduce
// carries: a round's message also holds, in the first round, the element
// count (8 bytes).
const reduceChunk = (MaxReducePayload - 8) / 8

// Allreduce combines every rank's vector mine with op, element by element,
// and returns the result at every rank. The ranks pass vectors of the same
// length (any length: long vectors go in several rounds of at most
// reduceChunk elements). The fold runs in rank order at rank 0, so that
// float64 results are the same at every rank and from run to run. Errors
// are those of AllreduceBytes; ftrma.ErrInvalid also for an unknown op.
func Allreduce[T Number](ctx context.Context, c *Comm, mine []T, op Op) ([]T, error) {
	return reduceTyped(ctx, c, "allreduce", 0, mine, op, true)
}

// Reduce combines every rank's vector mine with op, element by element,
// and returns the result at root; the other ranks get nil once their
// vector is sent. Otherwise as Allreduce; errors are those of ReduceBytes.
func Reduce[T Number](ctx context.Context, c *Comm, root ftrma.Rank, mine []T, op Op) ([]T, error) {
	return reduceTyped(ctx, c, "reduce", root, mine, op, false)
}

func reduceTyped[T Number](ctx context.Context, c *Comm, opName string, root ftrma.Rank, mine []T, op Op, all bool) ([]T, error) {
	combine, err := combiner[T](op)
	if err != nil {
		return nil, &ftrma.OpError{Op: opName, Rank: -1, Err: err}
	}
	get, bits := codec[T]()
	fold := func(acc, in []byte) {
		for i := 0; i+8 <= len(acc); i += 8 {
			be.PutUint64(acc[i:], bits(combine(get(acc[i:]), get(in[i:]))))
		}
	}
	var out []T
	for off := 0; off == 0 || off < len(mine); off += reduceChunk {
		chunk := mine[off:min(off+reduceChunk, len(mine))]
		var msg []byte
		if off == 0 {
			msg = be.AppendUint64(msg, uint64(len(mine)))
		}
		for _, v := range chunk {
			msg = be.AppendUint64(msg, bits(v))
		}
		first := off == 0
		res, err := c.reduce(ctx, opName, root, msg, func(acc, in []byte) error {
			if first {
				if len(acc) < 8 {
					return fmt.Errorf("%w: %d bytes where a vector's length belongs", ftrma.ErrInvalid, len(acc))
				}
				if n, m := be.Uint64(acc), be.Uint64(in); n != m {
					return fmt.Errorf("%w: vector of %d elements, rank 0's has %d", ftrma.ErrInvalid, m, n)
				}
				fold(acc[8:], in[8:])
				return nil
			}
			fold(acc, in)
			return nil
		}, all)
		if err != nil {
			return nil, err
		}
		if res == nil {
			continue // Reduce away from the root
		}
		if first {
			res = res[8:]
		}
		for i := 0; i+8 <= len(res); i += 8 {
			out = append(out, get(res[i:]))
		}
	}
	if out == nil && (all || c.rank == root) {
		out = []T{}
	}
	return out, nil
}

// codec returns how an element of type T is read from a message and turned
// into the 8 bytes (big-endian) that carry it.
func codec[T Number]() (get func([]byte) T, bits func(T) uint64) {
	var z T
	if _, ok := any(z).(float64); ok {
		return func(b []byte) T { return T(math.Float64frombits(be.Uint64(b))) },
			func(v T) uint64 { return math.Float64bits(float64(v)) }
	}
	// int64 and uint64: the conversions keep the bits.
	return func(b []byte) T { return T(be.Uint64(b)) },
		func(v T) uint64 { return uint64(v) }
}

// combiner returns the element function of op.
func combiner[T Number](op Op) (func(a, b T) T, error) {
	switch op {
	case Sum:
		return func(a, b T) T { return a + b }, nil
	case Prod:
		return func(a, b T) T { return a * b }, nil
	case Min:
		return func(a, b T) T { return min(a, b) }, nil
	case Max:
		return func(a, b T) T { return max(a, b) }, nil
	}
	return nil, fmt.Errorf("%w: unknown reduction %v", ftrma.ErrInvalid, op)
}
