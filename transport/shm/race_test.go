//go:build linux && race

package shm

import "testing"

// raceBuild: copies run many times slower under the race detector.
const raceBuild = true

// A message through a ring orders, for the race detector too, what its
// sender did before sending before what its receiver does after taking it
// (racesync.go): a plain write before a Send and a plain read after the
// receipt must not be reported as a race. Without the annotations the
// detector sees no order between them, reports one, and fails the test.
func TestRingOrdersForRaceDetector(t *testing.T) {
	ts, rs, _ := cluster(t, 2, clusterOpts{})
	var plain [8]byte // written by the sender, read by the receiver's side
	// Nothing but the ring orders this goroutine before the reader.
	go func() {
		plain[0] = 42
		if err := ts[0].Send(1, []byte("after the write")); err != nil {
			t.Error(err)
		}
	}()
	rs[1].Await(t, testCtx(t), "the message", func() bool { return rs[1].Count() == 1 })
	if plain[0] != 42 {
		t.Fatalf("the receiver read %d, want 42", plain[0])
	}
}
