package comm

import "github.com/ftrma/ftrma/revoke"

// BroadcastNeighbors returns the ranks the reliable broadcast of c's
// runtime forwards to (got), and its neighbours in the graph over the
// ranks present there alone (want: what a settled broadcast forwards to).
// They differ while admissions are not settled.
func BroadcastNeighbors(c *Comm) (got, want []int) {
	done := make(chan [2][]int, 1)
	c.rt.do(func() {
		m := c.rt.m
		var absent []int
		for r, a := range m.absent {
			if a {
				absent = append(absent, r)
			}
		}
		done <- [2][]int{m.bc.Neighbors(), revoke.New(m.self, m.n, absent...).Neighbors()}
	})
	select {
	case v := <-done:
		return v[0], v[1]
	case <-c.rt.done:
		return nil, nil
	}
}
