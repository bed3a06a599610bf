package agree

import (
	"fmt"
	"testing"
)

// BenchmarkFailureFree measures the machines' CPU cost of one failure-free
// instance, summed over all n ranks, with every message encoded and parsed:
// what the ranks of a job spend together, not a latency.
func BenchmarkFailureFree(b *testing.B) {
	for _, n := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ags := make([]*Agreement, n)
			for r := range ags {
				ags[r] = New(r, n)
			}
			type packet struct {
				from, to int
				body     []byte
			}
			var wire []packet
			var buf []byte
			decided := 0
			flush := func(r int) {
				a := ags[r]
				if !a.HasReady() {
					return
				}
				rd := a.Ready()
				for _, o := range rd.Send {
					buf = o.Msg.AppendBinary(buf[:0])
					wire = append(wire, packet{r, o.To, append([]byte(nil), buf...)})
				}
				for _, d := range rd.Decided {
					decided++
					a.Forget(d.Inst)
				}
				a.Advance()
			}
			b.ReportAllocs()
			inst := uint64(0)
			for b.Loop() {
				inst++
				decided = 0
				for r := range ags {
					ags[r].Start(inst, ^uint64(0))
					flush(r)
				}
				for len(wire) > 0 {
					p := wire[0]
					wire = wire[1:]
					m, err := ParseMessage(p.body)
					if err != nil {
						b.Fatal(err)
					}
					ags[p.to].Step(p.from, m)
					flush(p.to)
				}
				if decided != n {
					b.Fatalf("%d of %d ranks decided", decided, n)
				}
			}
		})
	}
}
