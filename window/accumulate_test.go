package window_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
	"github.com/ftrma/ftrma/window"
)

var allOps = []window.Op{window.Sum, window.Replace, window.NoOp, window.Prod, window.Min, window.Max,
	window.BAnd, window.BOr, window.BXor, window.LAnd, window.LOr, window.LXor}

func TestOpString(t *testing.T) {
	want := []string{"SUM", "REPLACE", "NO_OP", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR"}
	for i, op := range allOps {
		if op.String() != want[i] {
			t.Errorf("Op %d: %q, want %q", int(op), op.String(), want[i])
		}
	}
	if s := window.Op(99).String(); s != "Op(99)" {
		t.Errorf("Op(99).String() = %q", s)
	}
}

// The sequential references, written per type without the window's code.
func refInt(op window.Op, a, b int64) int64 {
	l := func(x bool) int64 {
		if x {
			return 1
		}
		return 0
	}
	switch op {
	case window.Sum:
		return a + b
	case window.Replace:
		return b
	case window.NoOp:
		return a
	case window.Prod:
		return a * b
	case window.Min:
		if b < a {
			return b
		}
		return a
	case window.Max:
		if b > a {
			return b
		}
		return a
	case window.BAnd:
		return a & b
	case window.BOr:
		return a | b
	case window.BXor:
		return a ^ b
	case window.LAnd:
		return l(a != 0 && b != 0)
	case window.LOr:
		return l(a != 0 || b != 0)
	case window.LXor:
		return l((a != 0) != (b != 0))
	}
	panic(op)
}

func refUint(op window.Op, a, b uint64) uint64 {
	switch op {
	case window.Min:
		if b < a {
			return b
		}
		return a
	case window.Max:
		if b > a {
			return b
		}
		return a
	}
	return uint64(refInt(op, int64(a), int64(b)))
}

// refFloat follows the documented rules: NaN on either side gives NaN, and
// -0 is below +0.
func refFloat(op window.Op, a, b float64) float64 {
	less := func(x, y float64) bool { return x < y || x == 0 && y == 0 && math.Signbit(x) && !math.Signbit(y) }
	switch op {
	case window.Sum:
		return a + b
	case window.Replace:
		return b
	case window.NoOp:
		return a
	case window.Prod:
		return a * b
	case window.Min, window.Max:
		if math.IsNaN(a) || math.IsNaN(b) {
			return math.NaN()
		}
		if less(b, a) == (op == window.Min) {
			return b
		}
		return a
	}
	panic(op)
}

func sameFloat(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || math.IsNaN(a) && math.IsNaN(b)
}

var (
	intVals   = []int64{0, 1, -1, 7, -13, math.MaxInt64, math.MinInt64, 0x5555}
	intOrigin = []int64{3, 0, -1, 7, 2, 1, -1, 0x0ff0}
	uintVals  = []uint64{0, 1, math.MaxUint64, 1 << 63, 12, 5, 0, 0xf0f0}
	uintOrig  = []uint64{0, 2, 1, 1 << 63, 5, 12, 9, 0x0ff0}
	fltVals   = []float64{0, math.Copysign(0, -1), 1.5, -2, math.NaN(), math.Inf(1), 3, -1e300}
	fltOrigin = []float64{math.Copysign(0, -1), 0, 2, math.NaN(), 4, -1, math.Inf(-1), 1e300}
)

// accCase checks one element type: rank 0 applies every op, with
// Accumulate, GetAccumulate, RgetAccumulate and FetchAndOp, to a vector at
// rank 1 that it set first, and compares the target and the results with
// the sequential reference.
func accCase[T window.Elem](ctx context.Context, w *window.Window, vals, origin []T, ref func(window.Op, T, T) T, same func(a, b T) bool, ops []window.Op) error {
	a := window.As[T](w)
	n := len(vals)
	set := func() error {
		if err := a.Accumulate(1, 0, vals, window.Replace); err != nil {
			return err
		}
		return w.Flush(ctx, 1)
	}
	get := func() ([]T, error) {
		got := make([]T, n)
		if err := a.GetAccumulate(1, 0, nil, got, window.NoOp); err != nil {
			return nil, err
		}
		return got, w.Flush(ctx, 1)
	}
	for _, op := range ops {
		for form := range 4 {
			if err := set(); err != nil {
				return err
			}
			result := make([]T, n)
			var err error
			switch form {
			case 0:
				err = a.Accumulate(1, 0, origin, op)
			case 1:
				err = a.GetAccumulate(1, 0, origin, result, op)
			case 2:
				var r *window.Request
				if r, err = a.RgetAccumulate(1, 0, origin, result, op); err == nil {
					err = r.Wait(ctx)
				}
			case 3:
				for i := range n {
					if err = a.FetchAndOp(1, 8*uint64(i), origin[i], &result[i], op); err != nil {
						break
					}
				}
			}
			if err == nil {
				err = w.Flush(ctx, 1)
			}
			if err != nil {
				return fmt.Errorf("%v form %d: %v", op, form, err)
			}
			got, err := get()
			if err != nil {
				return err
			}
			for i := range n {
				if want := ref(op, vals[i], origin[i]); !same(got[i], want) {
					return fmt.Errorf("%v form %d: element %d: op(%v, %v) = %v, want %v", op, form, i, vals[i], origin[i], got[i], want)
				}
				if form > 0 && !same(result[i], vals[i]) {
					return fmt.Errorf("%v form %d: element %d: result %v, want the prior %v", op, form, i, result[i], vals[i])
				}
			}
		}
	}
	return nil
}

// Every op on every type, in every form, against the sequential reference.
func TestAccumulateOpsMatchReference(t *testing.T) {
	eq := func(a, b int64) bool { return a == b }
	ueq := func(a, b uint64) bool { return a == b }
	run(t, 2, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 64)
		if err != nil {
			return err
		}
		var check error
		if c.Rank() == 0 { // rank 1 waits at the barrier either way
			if err := accCase(ctx, w, intVals, intOrigin, refInt, eq, allOps); err != nil {
				check = fmt.Errorf("int64: %v", err)
			} else if err := accCase(ctx, w, uintVals, uintOrig, refUint, ueq, allOps); err != nil {
				check = fmt.Errorf("uint64: %v", err)
			} else if err := accCase(ctx, w, fltVals, fltOrigin, refFloat, sameFloat, allOps[:6]); err != nil {
				check = fmt.Errorf("float64: %v", err)
			}
		}
		return errors.Join(check, c.Barrier(ctx), w.Free(ctx))
	})
}

// The float64 MIN and MAX rules the package doc states.
func TestFloatMinMaxRules(t *testing.T) {
	negZero := math.Copysign(0, -1)
	cases := []struct {
		op         window.Op
		old, v, ok float64
	}{
		{window.Min, 0, negZero, negZero},
		{window.Min, negZero, 0, negZero},
		{window.Max, negZero, 0, 0},
		{window.Max, 0, negZero, 0},
		{window.Min, math.NaN(), 1, math.NaN()},
		{window.Max, 1, math.NaN(), math.NaN()},
		{window.Min, math.Inf(-1), 1, math.Inf(-1)},
	}
	world := commtest.New(t, 1)
	ctx := testCtx(t, time.Minute)
	w, err := window.Allocate(ctx, world.Comms[0], 8)
	if err != nil {
		t.Fatal(err)
	}
	a := window.As[float64](w)
	for _, tc := range cases {
		var old float64
		if err := a.FetchAndOp(0, 0, tc.old, &old, window.Replace); err != nil {
			t.Fatal(err)
		}
		if err := a.FetchAndOp(0, 0, tc.v, nil, tc.op); err != nil {
			t.Fatal(err)
		}
		if err := a.FetchAndOp(0, 0, 0, &old, window.NoOp); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if !sameFloat(old, tc.ok) {
			t.Errorf("%v(%v, %v) = %v, want %v", tc.op, tc.old, tc.v, old, tc.ok)
		}
	}
}

// Bitwise and logical operations on float64, and unknown operations, fail
// with ErrInvalid and change nothing; so do ops other than REPLACE and NO_OP
// on bytes.
func TestAccumulateInvalid(t *testing.T) {
	world := commtest.New(t, 1)
	ctx := testCtx(t, time.Minute)
	w, err := window.Allocate(ctx, world.Comms[0], 16)
	if err != nil {
		t.Fatal(err)
	}
	binary.NativeEndian.PutUint64(w.Bytes(), math.Float64bits(2.5))
	f := window.As[float64](w)
	for _, op := range []window.Op{window.BAnd, window.BOr, window.BXor, window.LAnd, window.LOr, window.LXor, 0, 13, -1} {
		var res [1]float64
		for name, err := range map[string]error{
			"Accumulate":    f.Accumulate(0, 0, []float64{1}, op),
			"GetAccumulate": f.GetAccumulate(0, 0, []float64{1}, res[:], op),
			"FetchAndOp":    f.FetchAndOp(0, 0, 1, &res[0], op),
		} {
			if !errors.Is(err, ftrma.ErrInvalid) {
				t.Errorf("%s %v on float64: %v, want ErrInvalid", name, op, err)
			}
		}
		if _, err := f.Raccumulate(0, 0, []float64{1}, op); !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("Raccumulate %v on float64: %v, want ErrInvalid", op, err)
		}
	}
	if err := w.Accumulate(0, 0, []int64{1}, 42); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Accumulate Op(42) on int64: %v, want ErrInvalid", err)
	}
	if err := w.AccumulateBytes(0, 0, []byte{1}, window.Sum); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("AccumulateBytes SUM: %v, want ErrInvalid", err)
	}
	if err := w.AccumulateBytes(0, 3, []byte{1}, window.NoOp); err != nil {
		t.Errorf("AccumulateBytes NO_OP: %v", err)
	}
	if err := w.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if v := math.Float64frombits(binary.NativeEndian.Uint64(w.Bytes())); v != 2.5 {
		t.Errorf("the target changed to %v", v)
	}
}

// Ranks accumulate into rank 0 at once with operations built from
// compare-and-swap loops; the totals are exact only if every element update
// is atomic: float64 SUM of ones, uint64 BOR of a distinct bit per update
// (a lost update loses its bit), int64 BXOR of one mask an even number of
// times, and GetAccumulate SUM whose results, over all ranks, are each
// prior total exactly once.
func TestAccumulateConcurrentAtomic(t *testing.T) {
	const n, iters, elems = 4, 16, 5
	run(t, n, func(ctx context.Context, c *comm.Comm) error {
		w, err := window.Allocate(ctx, c, 8*(3+elems))
		if err != nil {
			return err
		}
		me := int(c.Rank())
		f, u := window.As[float64](w), window.As[uint64](w)
		ones := []float64{1, 1, 1, 1, 1}
		seen := make([]byte, 0, 8*iters)
		for i := range iters {
			if err := f.Accumulate(0, 24, ones, window.Sum); err != nil {
				return err
			}
			if err := u.Accumulate(0, 8, []uint64{1 << (me*iters + i)}, window.BOr); err != nil {
				return err
			}
			if err := w.Accumulate(0, 16, []int64{0x3c3c}, window.BXor); err != nil {
				return err
			}
			var prior float64
			if err := f.FetchAndOp(0, 0, 1, &prior, window.Sum); err != nil {
				return err
			}
			seen = binary.LittleEndian.AppendUint64(seen, uint64(prior))
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		all, err := c.Allgather(ctx, seen)
		if err != nil {
			return err
		}
		check := func() error {
			if me != 0 {
				return nil
			}
			got := make([]uint64, 3+elems)
			if err := u.GetAccumulate(0, 0, nil, got, window.NoOp); err != nil {
				return err
			}
			if err := w.Flush(ctx, 0); err != nil {
				return err
			}
			if v := math.Float64frombits(got[0]); v != n*iters {
				return fmt.Errorf("fetch-and-op SUM total %v, want %d", v, n*iters)
			}
			if got[1] != math.MaxUint64 {
				return fmt.Errorf("BOR lost updates: %d bits of %d set", bits.OnesCount64(got[1]), n*iters)
			}
			if got[2] != 0 {
				return fmt.Errorf("BXOR of an even number of masks left %#x", got[2])
			}
			for i, b := range got[3:] {
				if v := math.Float64frombits(b); v != n*iters {
					return fmt.Errorf("element %d: SUM total %v, want %d", i, v, n*iters)
				}
			}
			count := make([]int, n*iters)
			for _, b := range all {
				for j := 0; j+8 <= len(b); j += 8 {
					if p := binary.LittleEndian.Uint64(b[j:]); p < uint64(len(count)) {
						count[p]++
					}
				}
			}
			for p, k := range count {
				if k != 1 {
					return fmt.Errorf("prior total %d seen %d times, want once", p, k)
				}
			}
			return nil
		}()
		return errors.Join(check, c.Barrier(ctx), w.Free(ctx))
	})
}
