package agree_test

import (
	"fmt"

	"github.com/ftrma/ftrma/agree"
)

// Three ranks agree in one process; rank 2 has crashed before the agreement,
// and ranks 0 and 1 have been told. Messages travel as bytes, as they would
// between processes.
func Example() {
	const n = 3
	ranks := []*agree.Agreement{agree.New(0, n), agree.New(1, n), agree.New(2, n)}
	dead := map[int]bool{2: true}
	for r := range 2 {
		ranks[r].Failed(2)
	}

	type packet struct {
		from, to int
		body     []byte
	}
	var wire []packet
	flush := func(r int) {
		a := ranks[r]
		if !a.HasReady() {
			return
		}
		rd := a.Ready()
		for _, o := range rd.Send {
			wire = append(wire, packet{r, o.To, o.Msg.AppendBinary(nil)})
		}
		for _, d := range rd.Decided {
			fmt.Printf("rank %d: instance %d decided %#x, failed %v\n", r, d.Inst, d.Value, d.Failed)
			a.Forget(d.Inst)
		}
		a.Advance()
	}

	ranks[0].Start(1, 0b1110)
	flush(0)
	ranks[1].Start(1, 0b0111)
	flush(1)
	for len(wire) > 0 {
		p := wire[0]
		wire = wire[1:]
		if dead[p.to] {
			continue
		}
		m, err := agree.ParseMessage(p.body)
		if err != nil {
			continue
		}
		ranks[p.to].Step(p.from, m)
		flush(p.to)
	}
	// Output:
	// rank 0: instance 1 decided 0x6, failed [2]
	// rank 1: instance 1 decided 0x6, failed [2]
}
