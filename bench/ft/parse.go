package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ftrma/ftrma/bench/internal/ulfm"
	"github.com/ftrma/ftrma/internal/result"
)

// kind is the type of one line printed by the rank program.
type kind int

const (
	kNone       kind = iota // not a line of the rank program
	kResult                 // RESULT <bench> <size> <value> <unit>
	kPid                    // pid <rank> <pid>: the victim, ready to be killed
	kReady                  // ready <rank>: a survivor watching the victim
	kKnew                   // knew <rank> <unixnano>: a survivor saw the failure
	kAlsoFailed             // alsofailed <rank> <r1,r2,...>: a survivor saw other failures
	kRevokeT0               // revoke <round> t0 <unixnano>: rank 0 revoked
	kRevokeSeen             // revoke <round> seen <rank> <unixnano>: a rank saw it
	kRankDown               // ftrun (stderr) reports that a rank died, was declared failed or exited non-zero
	kOp                     // op <name> <rank> <start> <end>: a rank's Replace, Shrink or spare Init returned
	kGrow                   // grow <rank> <start> <end> <keys> <bytes> <held>: a rank's store Grow or Join returned
	kError                  // error <rank> <step> <text>: a call of the ULFM program failed (it exits 3)
)

// event is one parsed line of the rank program.
type event struct {
	kind   kind
	rank   int           // kPid, kReady, kKnew, kAlsoFailed, kRevokeSeen
	round  int           // kRevokeT0, kRevokeSeen
	nanos  int64         // kKnew, kRevokeT0, kRevokeSeen: wall clock, ns since 1970
	pid    int           // kPid
	others []int         // kAlsoFailed
	res    result.Result // kResult (System unset)
	text   string        // kRankDown: ftrun's report; kError: the whole line
	op     string        // kOp: replace, shrink or spareinit
	start  int64         // kOp, kGrow: when the call began, ns since 1970 (nanos: when it returned)
	counts [3]int64      // kGrow: keys and bytes the rank copied to new replicas, keys it holds
}

// ftrunReport matches ftrun's reports of a rank that is gone or going:
//
//	ftrun: rank 3 failed at 1.234s: was killed by signal 9 (killed)
//	ftrun: rank 3 was declared failed by rank 2's detector at 0.230s: killing it
//	ftrun: rank 3 exited with status 1
var ftrunReport = regexp.MustCompile(`^ftrun: rank (\d+) (failed at|was declared failed|exited with status)`)

// parseFtrunReport recognizes, in a line of ftrun's stderr, ftrun's report
// that a rank died, was declared failed, or exited with a non-zero status.
func parseFtrunReport(line string) (event, bool) {
	m := ftrunReport.FindStringSubmatch(line)
	if m == nil {
		return event{}, false
	}
	r, err := strconv.Atoi(m[1])
	if err != nil {
		return event{}, false
	}
	return event{kind: kRankDown, rank: r, text: line}, true
}

// parseEvent parses one output line of the rank program. Text before the
// keyword (a launcher's "[rank] " tag) is ignored. ok is false for lines that
// are not the rank program's (ftrun's reports, warnings); err is set for a
// line that starts with a keyword but is malformed.
func parseEvent(line string) (ev event, ok bool, err error) {
	if r, isRes, err := result.ParseLine(line); isRes || err != nil {
		return event{kind: kResult, res: r}, err == nil, err
	}
	f := ulfm.Fields(line)
	if len(f) == 0 {
		return event{}, false, nil
	}
	bad := func(why string) (event, bool, error) {
		return event{}, false, fmt.Errorf("rank output %q: %s", line, why)
	}
	nat := ulfm.Nat
	switch f[0] {
	case "pid", "ready", "knew", "alsofailed":
		want := map[string]int{"pid": 3, "ready": 2, "knew": 3, "alsofailed": 3}[f[0]]
		if len(f) != want {
			return bad(fmt.Sprintf("want %d fields", want))
		}
		r, ok := nat(f[1])
		if !ok {
			return bad("bad rank")
		}
		ev.rank = int(r)
		switch f[0] {
		case "pid":
			p, ok := nat(f[2])
			if !ok || p == 0 {
				return bad("bad pid")
			}
			ev.kind, ev.pid = kPid, int(p)
		case "ready":
			ev.kind = kReady
		case "knew":
			t, ok := nat(f[2])
			if !ok || t == 0 {
				return bad("bad time")
			}
			ev.kind, ev.nanos = kKnew, t
		case "alsofailed":
			for _, s := range strings.Split(f[2], ",") {
				o, ok := nat(s)
				if !ok {
					return bad("bad rank list")
				}
				ev.others = append(ev.others, int(o))
			}
			ev.kind = kAlsoFailed
		}
		return ev, true, nil
	case "error":
		if len(f) < 4 {
			return bad("want error RANK STEP TEXT")
		}
		if _, ok := nat(f[1]); !ok {
			return bad("bad rank")
		}
		return event{kind: kError, text: strings.Join(f, " ")}, true, nil
	case "op":
		if len(f) != 5 {
			return bad("want op NAME RANK START END")
		}
		if f[1] != "replace" && f[1] != "shrink" && f[1] != "spareinit" {
			return bad("unknown operation")
		}
		r, ok1 := nat(f[2])
		t0, ok2 := nat(f[3])
		t1, ok3 := nat(f[4])
		if !ok1 || !ok2 || !ok3 || t0 == 0 || t1 < t0 {
			return bad("bad rank or times")
		}
		return event{kind: kOp, op: f[1], rank: int(r), start: t0, nanos: t1}, true, nil
	case "grow":
		if len(f) != 7 {
			return bad("want grow RANK START END KEYS BYTES HELD")
		}
		v, ok := ulfm.Nats(f[1:7])
		if !ok {
			return bad("bad number")
		}
		if v[1] == 0 || v[2] < v[1] {
			return bad("bad times")
		}
		return event{kind: kGrow, rank: int(v[0]), start: v[1], nanos: v[2], counts: [3]int64{v[3], v[4], v[5]}}, true, nil
	case "revoke":
		if len(f) < 4 {
			return bad("want revoke ROUND t0 TIME or revoke ROUND seen RANK TIME")
		}
		round, ok := nat(f[1])
		if !ok {
			return bad("bad round")
		}
		ev.round = int(round)
		switch {
		case f[2] == "t0" && len(f) == 4:
			ev.kind = kRevokeT0
		case f[2] == "seen" && len(f) == 5:
			r, ok := nat(f[3])
			if !ok {
				return bad("bad rank")
			}
			ev.kind, ev.rank = kRevokeSeen, int(r)
		default:
			return bad("want revoke ROUND t0 TIME or revoke ROUND seen RANK TIME")
		}
		t, ok := nat(f[len(f)-1])
		if !ok || t == 0 {
			return bad("bad time")
		}
		ev.nanos = t
		return ev, true, nil
	}
	return event{}, false, nil
}

// everyoneKnows computes one detect run's value: the time from the kill (the
// driver's clock just before it sent SIGKILL) until the last of the n-1
// survivors knew of the failure, from the survivors' knew events. It fails
// unless exactly the n-1 survivors (every rank but victim, once each)
// reported, and when a survivor knew before the kill: that would be a false
// detection, not a measurement.
func everyoneKnows(knew []event, n, victim int, kill int64) (ms float64, err error) {
	seen := make(map[int]bool)
	var last int64
	for _, e := range knew {
		switch {
		case e.rank == victim || e.rank < 0 || e.rank >= n:
			return 0, fmt.Errorf("knew from rank %d, which is not a survivor of %d ranks with victim %d", e.rank, n, victim)
		case seen[e.rank]:
			return 0, fmt.Errorf("rank %d reported twice", e.rank)
		case e.nanos < kill:
			return 0, fmt.Errorf("rank %d knew of the failure %.3f ms before the kill (false detection)", e.rank, float64(kill-e.nanos)/1e6)
		}
		seen[e.rank] = true
		last = max(last, e.nanos)
	}
	if len(seen) != n-1 {
		var missing []int
		for r := range n {
			if r != victim && !seen[r] {
				missing = append(missing, r)
			}
		}
		return 0, fmt.Errorf("%d of %d survivors reported; missing ranks %v", len(seen), n-1, missing)
	}
	return float64(last-kill) / 1e6, nil
}

// revokeLatencies computes revoke_lat of every round of a coll run: the last
// rank's "seen" minus rank 0's t0, in milliseconds, in round order. Every
// round needs a t0 and a seen from each of the n ranks; a seen before t0 is an
// error.
func revokeLatencies(evs []event, n int) ([]float64, error) {
	t0 := make(map[int]int64)
	seen := make(map[int]map[int]int64)
	for _, e := range evs {
		switch e.kind {
		case kRevokeT0:
			if _, dup := t0[e.round]; dup {
				return nil, fmt.Errorf("revoke round %d: two t0 lines", e.round)
			}
			t0[e.round] = e.nanos
		case kRevokeSeen:
			if e.rank < 0 || e.rank >= n {
				return nil, fmt.Errorf("revoke round %d: rank %d out of range", e.round, e.rank)
			}
			if seen[e.round] == nil {
				seen[e.round] = make(map[int]int64)
			}
			if _, dup := seen[e.round][e.rank]; dup {
				return nil, fmt.Errorf("revoke round %d: rank %d reported twice", e.round, e.rank)
			}
			seen[e.round][e.rank] = e.nanos
		}
	}
	var rounds []int
	for r := range t0 {
		rounds = append(rounds, r)
	}
	for r := range seen {
		if _, ok := t0[r]; !ok {
			return nil, fmt.Errorf("revoke round %d: no t0", r)
		}
	}
	if len(rounds) == 0 {
		return nil, errors.New("no revoke rounds in the output")
	}
	slices.Sort(rounds)
	out := make([]float64, 0, len(rounds))
	for _, r := range rounds {
		if len(seen[r]) != n {
			return nil, fmt.Errorf("revoke round %d: %d of %d ranks saw the revocation", r, len(seen[r]), n)
		}
		var last int64
		for rank, t := range seen[r] {
			if t < t0[r] {
				return nil, fmt.Errorf("revoke round %d: rank %d saw it %.3f ms before rank 0 revoked", r, rank, float64(t0[r]-t)/1e6)
			}
			last = max(last, t)
		}
		out = append(out, float64(last-t0[r])/1e6)
	}
	return out, nil
}

// lastReturn computes one replace job's value for operation op: the time
// from the kill until the last rank's op returned, in milliseconds, from
// the job's op events. want lists the ranks that must report op, once
// each. An op that began before the kill is an error: the survivors call
// it only once they know of the failure, and the spare starts after it.
func lastReturn(evs []event, op string, want []int, kill int64) (float64, error) {
	seen := make(map[int]bool)
	var last int64
	for _, e := range evs {
		if e.kind != kOp || e.op != op {
			continue
		}
		switch {
		case !slices.Contains(want, e.rank):
			return 0, fmt.Errorf("%s from rank %d, which should not call it", op, e.rank)
		case seen[e.rank]:
			return 0, fmt.Errorf("%s: rank %d reported twice", op, e.rank)
		case e.start < kill:
			return 0, fmt.Errorf("%s: rank %d began it %.3f ms before the kill", op, e.rank, float64(kill-e.start)/1e6)
		}
		seen[e.rank] = true
		last = max(last, e.nanos)
	}
	if len(seen) != len(want) {
		var missing []int
		for _, r := range want {
			if !seen[r] {
				missing = append(missing, r)
			}
		}
		return 0, fmt.Errorf("%s: %d of %d ranks reported; missing %v", op, len(seen), len(want), missing)
	}
	return float64(last-kill) / 1e6, nil
}

// growTotals is one grow job's values from its grow events, one from each
// of the n ranks: the time from the first rank's Grow or Join call to the
// last one's return (ms), and the sums of the keys and bytes the ranks
// copied to new replicas.
func growTotals(evs []event, n int) (ms float64, keys, bytes int64, err error) {
	seen := make(map[int]bool)
	var first, last int64
	for _, e := range evs {
		switch {
		case e.rank < 0 || e.rank >= n:
			return 0, 0, 0, fmt.Errorf("grow from rank %d of %d", e.rank, n)
		case seen[e.rank]:
			return 0, 0, 0, fmt.Errorf("grow: rank %d reported twice", e.rank)
		}
		seen[e.rank] = true
		if first == 0 || e.start < first {
			first = e.start
		}
		last = max(last, e.nanos)
		keys += e.counts[0]
		bytes += e.counts[1]
	}
	if len(seen) != n {
		return 0, 0, 0, fmt.Errorf("grow: %d of %d ranks reported", len(seen), n)
	}
	return float64(last-first) / 1e6, keys, bytes, nil
}
