package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
)

// checkAll fails the test for every rank's error.
func checkAll(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// contribution is rank r's vector of length m in the tests below: values
// whose float sum depends on the order of the additions.
func contribution(r, m int) ([]int64, []float64) {
	ints := make([]int64, m)
	floats := make([]float64, m)
	for i := range m {
		ints[i] = int64((r+1)*(i+3)%17) - 8
		floats[i] = math.Ldexp(1+float64(i%7)/8, 40*(r%2)) * float64(1-2*((r+i)%2))
		if r == 2 {
			floats[i] = 1.0 / 3
		}
	}
	return ints, floats
}

// foldRef folds the ranks' vectors in rank order, as Allreduce promises.
func foldRef[T comm.Number](vs [][]T, f func(a, b T) T) []T {
	acc := slices.Clone(vs[0])
	for _, v := range vs[1:] {
		for i := range acc {
			acc[i] = f(acc[i], v[i])
		}
	}
	return acc
}

// Allreduce and Reduce give the rank-order fold of every rank's vector, bit
// for bit (float sums included), at every rank for Allreduce and at the root
// for Reduce, for vectors empty, short, exactly one round long and longer
// (several rounds).
func TestAllreduceAndReduceSizes(t *testing.T) {
	const n = 5
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	ch := comm.ReduceChunk
	for _, m := range []int{0, 1, 13, ch, ch + 1, 2*ch + 5} {
		ints := make([][]int64, n)
		floats := make([][]float64, n)
		for r := range n {
			ints[r], floats[r] = contribution(r, m)
		}
		wantSum := foldRef(ints, func(a, b int64) int64 { return a + b })
		wantProd := foldRef(ints, func(a, b int64) int64 { return a * b })
		wantMin := foldRef(ints, func(a, b int64) int64 { return min(a, b) })
		wantFSum := foldRef(floats, func(a, b float64) float64 { return a + b })
		wantFMax := foldRef(floats, func(a, b float64) float64 { return max(a, b) })
		errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
			r := int(c.Rank())
			check := func(what string, got, want any) error {
				if fmt.Sprint(got) != fmt.Sprint(want) {
					return fmt.Errorf("m=%d: %s differs from the rank-order fold", m, what)
				}
				return nil
			}
			s, err := comm.Allreduce(ctx, c, ints[r], comm.Sum)
			if err != nil {
				return err
			}
			p, err := comm.Allreduce(ctx, c, ints[r], comm.Prod)
			if err != nil {
				return err
			}
			mn, err := comm.Allreduce(ctx, c, ints[r], comm.Min)
			if err != nil {
				return err
			}
			fs, err := comm.Allreduce(ctx, c, floats[r], comm.Sum)
			if err != nil {
				return err
			}
			fm, err := comm.Allreduce(ctx, c, floats[r], comm.Max)
			if err != nil {
				return err
			}
			u, err := comm.Allreduce(ctx, c, []uint64{math.MaxUint64 - uint64(r)}, comm.Min)
			if err != nil {
				return err
			}
			if err := errors.Join(check("int64 sum", s, wantSum), check("int64 prod", p, wantProd),
				check("int64 min", mn, wantMin), check("uint64 min", u, []uint64{math.MaxUint64 - n + 1})); err != nil {
				return err
			}
			for i := range fs {
				if math.Float64bits(fs[i]) != math.Float64bits(wantFSum[i]) || math.Float64bits(fm[i]) != math.Float64bits(wantFMax[i]) {
					return fmt.Errorf("m=%d: float element %d: sum %v max %v, want %v %v", m, i, fs[i], fm[i], wantFSum[i], wantFMax[i])
				}
			}
			if len(s) != m || len(fs) != m {
				return fmt.Errorf("m=%d: results of %d and %d elements", m, len(s), len(fs))
			}
			const root = 3
			got, err := comm.Reduce(ctx, c, root, floats[r], comm.Sum)
			if err != nil {
				return err
			}
			if r != root {
				if got != nil {
					return fmt.Errorf("reduce away from the root returned %d elements", len(got))
				}
				return nil
			}
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(wantFSum[i]) {
					return fmt.Errorf("m=%d: reduce element %d: %v, want %v", m, i, got[i], wantFSum[i])
				}
			}
			if len(got) != m {
				return fmt.Errorf("m=%d: reduce gave %d elements", m, len(got))
			}
			return nil
		})
		checkAll(t, errs)
		if t.Failed() {
			return
		}
	}
}

// The byte form runs the caller's fold in rank order (here one that records
// the order), and contributions of different lengths are refused at every
// rank with ErrInvalid; so are vectors of different lengths, also when they
// differ only in a later round.
func TestAllreduceBytesOrderAndLengths(t *testing.T) {
	const n = 4
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		r := byte(c.Rank())
		// acc[0] counts the folds; acc[1+k] records the k-th contribution
		// folded.
		mine := make([]byte, 1+n)
		mine[0], mine[1] = 1, r
		got, err := c.AllreduceBytes(ctx, mine, func(acc, in []byte) {
			acc[1+acc[0]] = in[1]
			acc[0]++
		})
		if err != nil {
			return err
		}
		if want := []byte{n, 0, 1, 2, 3}; !slices.Equal(got, want) {
			return fmt.Errorf("fold order %v, want %v", got, want)
		}
		bad := make([]byte, 8+int(r)%2)
		if _, err := c.AllreduceBytes(ctx, bad, func(acc, in []byte) {}); !errors.Is(err, ftrma.ErrInvalid) {
			return fmt.Errorf("allreduce of different lengths: %v, want ErrInvalid", err)
		}
		long := make([]int64, comm.ReduceChunk+int(r)%2)
		if _, err := comm.Allreduce(ctx, c, long, comm.Sum); !errors.Is(err, ftrma.ErrInvalid) {
			return fmt.Errorf("allreduce of vectors of different lengths: %v, want ErrInvalid", err)
		}
		if _, err := comm.Allreduce(ctx, c, []int64{1}, comm.Op(99)); !errors.Is(err, ftrma.ErrInvalid) {
			return fmt.Errorf("unknown op: %v, want ErrInvalid", err)
		}
		if _, err := c.AllreduceBytes(ctx, make([]byte, comm.MaxReducePayload+1), func(acc, in []byte) {}); !errors.Is(err, ftrma.ErrInvalid) {
			return fmt.Errorf("oversized contribution: %v, want ErrInvalid", err)
		}
		if _, err := c.ReduceBytes(ctx, n, nil, func(acc, in []byte) {}); !errors.Is(err, ftrma.ErrRankOutOfRange) {
			return fmt.Errorf("reduce to rank %d of %d: %v, want ErrRankOutOfRange", n, n, err)
		}
		return nil
	})
	checkAll(t, errs)
}

// A rank that dies before or during an Allreduce, the root (rank 0)
// included, makes it fail with ErrProcFailed at every survivor, and none
// hangs; Reduce fails at its root. Each survivor runs Allreduce until it
// fails: none may go on for ever.
func TestAllreduceWithDeadRank(t *testing.T) {
	const n = 6
	cases := []struct {
		victim ftrma.Rank
		delay  time.Duration // < 0: dead before
	}{{3, -1}, {0, -1}, {3, 0}, {0, 0}, {5, 100 * time.Microsecond}, {0, time.Millisecond}}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("victim%d_after%v", tc.victim, tc.delay), func(t *testing.T) {
			w := commtest.New(t, n)
			ctx := testCtx(t, time.Minute)
			if tc.delay < 0 {
				w.Net.Crash(tc.victim)
			} else {
				go func() {
					time.Sleep(tc.delay)
					w.Net.Crash(tc.victim)
				}()
			}
			errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
				if c.Rank() == tc.victim {
					vctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
					defer cancel()
					for {
						if _, err := comm.Allreduce(vctx, c, []float64{1, float64(c.Rank())}, comm.Sum); err != nil {
							return nil
						}
					}
				}
				for round := 0; ; round++ {
					got, err := comm.Allreduce(ctx, c, []float64{1, float64(c.Rank())}, comm.Sum)
					if err != nil {
						if !errors.Is(err, ftrma.ErrProcFailed) {
							return fmt.Errorf("round %d: %v, want ErrProcFailed", round, err)
						}
						break
					}
					if got[0] != n {
						return fmt.Errorf("round %d: %d ranks counted", round, int(got[0]))
					}
				}
				// Reduce to a survivor fails at the root.
				root := (tc.victim + 1) % n
				_, err := comm.Reduce(ctx, c, root, []int64{1}, comm.Sum)
				if c.Rank() == root && !errors.Is(err, ftrma.ErrProcFailed) {
					return fmt.Errorf("reduce at the root: %v, want ErrProcFailed", err)
				}
				return nil
			})
			checkAll(t, errs)
		})
	}
}

// After a revocation Allreduce fails with ErrRevoked.
func TestAllreduceRevoked(t *testing.T) {
	const n = 3
	w := commtest.New(t, n)
	ctx := testCtx(t, time.Minute)
	errs := w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
		if c.Rank() == 1 {
			c.Revoke()
		}
		<-c.Revoked()
		if _, err := comm.Allreduce(ctx, c, []int64{1}, comm.Max); !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("allreduce after revoke: %v, want ErrRevoked", err)
		}
		return nil
	})
	checkAll(t, errs)
}

func BenchmarkAllreduce(b *testing.B) {
	for _, m := range []int{1, 1024} {
		b.Run(fmt.Sprintf("n8_m%d", m), func(b *testing.B) {
			w := commtest.New(b, 8)
			ctx := context.Background()
			start := make(chan struct{})
			done := make(chan error, 8)
			for _, c := range w.Comms[1:] {
				go func() {
					<-start
					v := make([]float64, m)
					for range b.N {
						if _, err := comm.Allreduce(ctx, c, v, comm.Sum); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
			}
			v := make([]float64, m)
			b.ReportAllocs()
			b.ResetTimer()
			close(start)
			for range b.N {
				if _, err := comm.Allreduce(ctx, w.Comms[0], v, comm.Sum); err != nil {
					b.Fatal(err)
				}
			}
			for range w.Comms[1:] {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
