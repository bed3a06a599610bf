package revoke

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/check/simq"
	"github.com/ftrma/ftrma/internal/overlay"
)

// TestDetectAndSpread joins the two machines as comm/ does: every rank runs a
// failure.Detector and a Broadcast; probes are delivered and answered like
// heartbeats; a suspicion is broadcast as "fail/<r>",
// and a delivered notice is fed back to the detector and the broadcast. On a
// virtual millisecond clock with random heartbeat and per-hop delays, random
// crashes (at most Degree(n)-1 in all) must end with every survivor knowing
// exactly the crashed ranks, no survivor ever suspected, and the heartbeat
// ring closed over the dead.
func TestDetectAndSpread(t *testing.T) {
	for _, n := range []int{5, 64, 256} {
		for seed := range uint64(seedCount(20)) {
			detectAndSpread(t, n, seed)
		}
	}
}

func detectAndSpread(t *testing.T, n int, seed uint64) {
	const (
		tickEvery = 10 // ms, Period/2
		beatDelay = 20 // heartbeat delays in [0, 20) ms
		hopDelay  = 3  // broadcast hop delays in [0, 3) ms
	)
	type ev struct {
		kind     byte // 't'ick, 'h'eartbeat, 'p'robe, 'b'roadcast frame, 'c'rash
		to, from int
		frame    []byte
	}
	name := fmt.Sprintf("n=%d, seed %d", n, seed)
	rng := rand.New(rand.NewPCG(seed, 0xfa11))
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var q simq.Queue[int, ev]
	at := func(t int, e ev) { q.Push(t, e) }
	ds := make([]*failure.Detector, n)
	bs := make([]*Broadcast, n)
	alive := make([]bool, n)
	now := 0
	// drain acts on both machines' output, feeding delivered notices back
	// until nothing is left.
	var drain func(r int)
	drain = func(r int) {
		for ds[r].HasReady() || bs[r].HasReady() {
			rd := ds[r].Ready()
			ds[r].Advance()
			for _, to := range rd.Heartbeats {
				at(now+rng.IntN(beatDelay), ev{kind: 'h', to: to, from: r})
			}
			for _, to := range rd.Probes {
				at(now+rng.IntN(beatDelay), ev{kind: 'p', to: to, from: r})
			}
			for _, x := range rd.Suspected {
				if alive[x] {
					t.Fatalf("%s, t=%dms: rank %d suspected live rank %d", name, now, r, x)
				}
				bs[r].Failed(x)
				bs[r].Originate(Message{ID: "fail/" + strconv.Itoa(x)})
			}
			br := bs[r].Ready()
			bs[r].Advance()
			for _, o := range br.Send {
				at(now+rng.IntN(hopDelay), ev{kind: 'b', to: o.To, from: r, frame: o.Msg.AppendBinary(nil)})
			}
			for _, m := range br.Deliver {
				x, err := strconv.Atoi(strings.TrimPrefix(m.ID, "fail/"))
				if err != nil {
					t.Fatalf("%s: delivered %q", name, m.ID)
				}
				ds[r].Failed(x, epoch.Add(time.Duration(now)*time.Millisecond))
				bs[r].Failed(x)
			}
		}
	}
	for r := range n {
		d, err := failure.New(failure.Config{}, r, n, epoch)
		if err != nil {
			t.Fatal(err)
		}
		ds[r], bs[r], alive[r] = d, New(r, n), true
		at(rng.IntN(tickEvery), ev{kind: 't', to: r})
		drain(r)
	}
	var crashed []int
	for range rng.IntN(overlay.Degree(n)) {
		r := rng.IntN(n)
		if !slices.Contains(crashed, r) {
			crashed = append(crashed, r)
			at(50+rng.IntN(500), ev{kind: 'c', to: r})
		}
	}
	slices.Sort(crashed)
	settled := func() bool {
		for r := range n {
			if alive[r] && !slices.Equal(ds[r].FailedRanks(), crashed) {
				return false
			}
		}
		return true
	}
	handle := func(e ev) {
		if !alive[e.to] {
			return
		}
		tnow := epoch.Add(time.Duration(now) * time.Millisecond)
		switch e.kind {
		case 'c':
			alive[e.to] = false
			return
		case 't':
			ds[e.to].Tick(tnow)
			at(now+tickEvery, e)
		case 'h':
			ds[e.to].Heartbeat(e.from, tnow)
		case 'p':
			ds[e.to].Probe(e.from, tnow)
		case 'b':
			m, err := ParseMessage(e.frame)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			bs[e.to].Step(e.from, m)
		}
		drain(e.to)
	}
	runTo := func(end int) {
		for {
			if t, ok := q.Next(); !ok || t >= end {
				break
			}
			var e ev
			now, e = q.Pop()
			handle(e)
		}
		now = end
	}
	runTo(600) // every crash has happened
	for !settled() {
		if now > 600+(len(crashed)+2)*200 {
			t.Fatalf("%s: crashes %v not known everywhere after %dms", name, crashed, now)
		}
		runTo(now + 10)
	}
	runTo(now + 3*60) // three Timeouts of quiet: no late false suspicion
	for r := range n {
		if !alive[r] {
			continue
		}
		if got := ds[r].FailedRanks(); !slices.Equal(got, crashed) {
			t.Fatalf("%s: rank %d knows %v failed, want %v", name, r, got, crashed)
		}
		pred, succ := r, r
		for pred = (r + n - 1) % n; !alive[pred]; pred = (pred + n - 1) % n {
		}
		for succ = (r + 1) % n; !alive[succ]; succ = (succ + 1) % n {
		}
		if ds[r].Observed() != pred || ds[r].Observer() != succ {
			t.Fatalf("%s: rank %d observes %d, sends to %d; want %d, %d", name, r, ds[r].Observed(), ds[r].Observer(), pred, succ)
		}
	}
}
