package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ftrma/ftrma/store"
)

// breakdown sums the store's traces (store.Trace) of one kind of call: ftkv
// bench -v's account of where a put's or a get's time goes.
type breakdown struct {
	calls  int
	phases []phaseSum // in the order first entered
}

// phaseSum is one phase summed over the calls; calls counts the calls that
// entered it.
type phaseSum struct {
	store.Phase
	calls int
}

// add counts the call t traced.
func (b *breakdown) add(t *store.Trace) {
	b.calls++
	for _, p := range t.Phases {
		b.sum(p, 1)
	}
}

// sum adds p, entered by calls calls, to its phase.
func (b *breakdown) sum(p store.Phase, calls int) {
	i := 0
	for i < len(b.phases) && b.phases[i].Name != p.Name {
		i++
	}
	if i == len(b.phases) {
		b.phases = append(b.phases, phaseSum{Phase: store.Phase{Name: p.Name}})
	}
	s := &b.phases[i]
	s.Time += p.Time
	s.RoundTrips += p.RoundTrips
	s.Flushes += p.Flushes
	s.Waited += p.Waited
	s.Sending += p.Sending
	s.calls += calls
}

// merge adds o's calls to b's.
func (b *breakdown) merge(o *breakdown) {
	b.calls += o.calls
	for _, p := range o.phases {
		b.sum(p.Phase, p.calls)
	}
}

// total is the sum of b's phases.
func (b *breakdown) total() phaseSum {
	t := phaseSum{Phase: store.Phase{Name: "total"}, calls: b.calls}
	for _, p := range b.phases {
		t.Time += p.Time
		t.RoundTrips += p.RoundTrips
		t.Flushes += p.Flushes
		t.Waited += p.Waited
		t.Sending += p.Sending
	}
	return t
}

func (b *breakdown) append(out []byte) []byte {
	out = binary.LittleEndian.AppendUint64(out, uint64(b.calls))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(b.phases)))
	for _, p := range b.phases {
		out = binary.LittleEndian.AppendUint16(out, uint16(len(p.Name)))
		out = append(out, p.Name...)
		for _, v := range []int64{int64(p.calls), int64(p.Time), int64(p.RoundTrips), int64(p.Flushes), int64(p.Waited), int64(p.Sending)} {
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
		}
	}
	return out
}

// decodeBreakdown reads a breakdown that append wrote at the start of in; it
// returns the rest of in.
func decodeBreakdown(in []byte) (*breakdown, []byte, error) {
	bad := errors.New("malformed breakdown")
	if len(in) < 12 {
		return nil, nil, bad
	}
	b := &breakdown{calls: int(binary.LittleEndian.Uint64(in))}
	n := int(binary.LittleEndian.Uint32(in[8:]))
	in = in[12:]
	for range n {
		if len(in) < 2 {
			return nil, nil, bad
		}
		l := int(binary.LittleEndian.Uint16(in))
		var v [6]int64
		if len(in) < 2+l+len(v)*8 {
			return nil, nil, bad
		}
		name := string(in[2 : 2+l])
		in = in[2+l:]
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(in[8*i:]))
		}
		in = in[len(v)*8:]
		b.sum(store.Phase{Name: name, Time: time.Duration(v[1]), RoundTrips: int(v[2]), Flushes: int(v[3]), Waited: int(v[4]), Sending: time.Duration(v[5])}, int(v[0]))
	}
	return b, in, nil
}

// print writes b as a table of means per call: each phase's share of the
// calls that entered it, its time and the part of it spent sending batches
// (Pushes), its round trips, flushes (ranks waited for) and the flushes
// that had to wait for their answers.
func (b *breakdown) print(w io.Writer, what string) {
	if b.calls == 0 {
		return
	}
	n := float64(b.calls)
	fmt.Fprintf(w, "  %s, mean per call over %d calls (store.Trace):\n", what, b.calls)
	fmt.Fprintf(w, "    %-16s %6s %9s %8s %7s %8s %7s\n", "phase", "in %", "us", "send us", "rtt", "flushes", "waited")
	row := func(p phaseSum) {
		fmt.Fprintf(w, "    %-16s %6.1f %9.2f %8.2f %7.2f %8.2f %7.2f\n", p.Name, 100*float64(p.calls)/n,
			us(p.Time)/n, us(p.Sending)/n, float64(p.RoundTrips)/n, float64(p.Flushes)/n, float64(p.Waited)/n)
	}
	for _, p := range b.phases {
		row(p)
	}
	row(b.total())
}

// results are b's means per call as result records: for each phase and the
// total, prefix.phase in us and prefix.phase.rtt in round trips.
func (b *breakdown) results(prefix string) (names []string, values []float64, units []string) {
	if b.calls == 0 {
		return nil, nil, nil
	}
	n := float64(b.calls)
	for _, p := range append(b.phases, b.total()) {
		names = append(names, prefix+"."+p.Name, prefix+"."+p.Name+".rtt")
		values = append(values, us(p.Time)/n, float64(p.RoundTrips)/n)
		units = append(units, "us", "round trips")
	}
	return names, values, units
}
