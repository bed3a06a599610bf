// Command rank is the rank program of bench/ft, the fault-tolerance
// benchmark. The driver starts it under ftrun in one of four modes:
//
//	ftrun -n N rank -mode detect [-victim R] [-poll 50us] [-wait 60s]
//	ftrun -n N --respawn=1 rank -mode replace -first replace|shrink [-victim R] [-poll 50us] [-wait 60s]
//	ftrun -n N --respawn=1 rank -mode grow [-keys 10000] [-value 64] [-copies 3] [-victim R] [-poll 50us] [-wait 60s]
//	ftrun -n N rank -mode coll -iters K -warmup W -rounds R [-poll 50us]
//
// Ranks run on one host, so the wall clock (time.Now().UnixNano()) of one
// rank can be compared with another's and with the driver's.
//
// detect: after a barrier the victim (default the last rank) prints
// "pid <rank> <pid>" and sleeps until the driver kills it with SIGKILL; every
// other rank prints "ready <rank>" and polls c.ProcFailed(victim), sleeping
// -poll between looks so that many processes on few cores all progress (with
// -poll 0 it waits on c.FailuresChanged() instead), and
// prints "knew <rank> <unixnano>" when it sees the failure. It then closes
// the communicator (no Finalize: a rank is gone) and exits 0, after a closing
// Agree of the survivors. A rank that, when it saw the victim fail, also
// believed other ranks failed prints "alsofailed <rank> <r1,r2,...>".
//
// replace: as detect, up to "knew"; then every survivor calls, on the
// world communicator, first the operation -first names and then the other
// one (Replace and Shrink), and prints "op <name> <rank> <start> <end>"
// (unixnano) after each. The spare that Replace starts in the victim's
// place prints "op spareinit <rank> <start> <end>" when its startup.Init
// returns (start: when its main began), <rank> being the victim's rank that
// it took over. Then the members of the replaced communicator (survivors
// and spare) leave after a closing Agree on it. The driver alternates
// -first between jobs, so that each operation is timed from the kill in
// half of them.
//
// grow: every rank opens a store (package store, -copies replicas) and
// puts its share of -keys keys of -value bytes; then as replace mode up to
// "knew", after which the survivors call store.Respawn (Replace, then Grow
// onto its communicator), and the spare calls store.JoinRespawned. Each
// prints, when its Grow or Join returned, "grow <rank> <start> <end> <keys>
// <bytes> <held>": the times (unixnano; a survivor's start is its end less
// Stats.GrowTime, the Grow without the Replace), its Stats.GrowKeys and
// GrowBytes, the keys and bytes it
// copied to new replicas, and its Stats.KeysHeld, the key slots in use.
// Rank 0 then reads back every key; then all leave after a closing Agree.
//
// coll: no failures. Rank 0 prints
//
//	RESULT agree_lat N <ms> ms    median over K consecutive Agree calls
//	RESULT shrink_lat N <ms> ms   median over K consecutive Shrinks, each on the previous result
//
// after W untimed calls of each. Each Shrink follows an untimed barrier on the
// world communicator (see coll for why). Then R revoke rounds: each round Shrinks the
// world into a fresh communicator and barriers on it; rank 0 reads the clock
// and revokes it, prints "revoke <round> t0 <unixnano>", and every rank
// (rank 0 too) waits for it (Comm.Revoked, a channel closed when it
// arrives: a poll with sleeps would add the timer's granularity, about 1 ms
// on an idle process) and prints "revoke <round> seen <rank>
// <unixnano>". The driver computes max(seen) - t0 per round.
//
// Any error is printed to stderr and makes the rank exit 1.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/store"
)

type options struct {
	mode           string
	first          string // replace mode: "replace" or "shrink"
	victim         int
	poll           time.Duration
	wait           time.Duration
	iters, warmup  int
	rounds         int
	keys, value    int // grow: keys in the store, bytes per value
	copies         int // grow: store replicas
	overallTimeout time.Duration
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("rank", flag.ContinueOnError)
	fs.StringVar(&o.mode, "mode", "", "detect, replace, grow or coll")
	fs.IntVar(&o.keys, "keys", 10000, "grow: keys put in the store")
	fs.IntVar(&o.value, "value", 64, "grow: bytes per value")
	fs.IntVar(&o.copies, "copies", 3, "grow: store replicas per key")
	fs.StringVar(&o.first, "first", "replace", "replace: the operation the survivors call first, replace or shrink")
	fs.IntVar(&o.victim, "victim", -1, "detect, replace, grow: the rank the driver kills (default: the last)")
	fs.DurationVar(&o.poll, "poll", 50*time.Microsecond, "detect, replace, grow: sleep between two looks at ProcFailed")
	fs.DurationVar(&o.wait, "wait", time.Minute, "detect, replace, grow: how long the victim waits to be killed before giving up")
	fs.IntVar(&o.iters, "iters", 50, "coll: timed Agree and Shrink calls")
	fs.IntVar(&o.warmup, "warmup", 5, "coll: untimed Agree and Shrink calls before timing")
	fs.IntVar(&o.rounds, "rounds", 10, "coll: revoke rounds")
	fs.DurationVar(&o.overallTimeout, "deadline", 4*time.Minute, "give up (exit 1) after this long")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() != 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.mode != "detect" && o.mode != "replace" && o.mode != "grow" && o.mode != "coll":
		return o, fmt.Errorf("-mode %q: want detect, replace, grow or coll", o.mode)
	case o.keys < 1 || o.value < 1 || o.copies < 1:
		return o, errors.New("-keys, -value and -copies must be positive")
	case o.first != "replace" && o.first != "shrink":
		return o, fmt.Errorf("-first %q: want replace or shrink", o.first)
	case o.iters < 1 || o.warmup < 0 || o.rounds < 0:
		return o, errors.New("-iters must be positive, -warmup and -rounds not negative")
	case o.poll < 0 || o.wait <= 0 || o.overallTimeout <= 0:
		return o, errors.New("-poll must not be negative, -wait and -deadline must be positive")
	}
	return o, nil
}

func main() {
	start := time.Now()
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.overallTimeout)
	defer cancel()
	c, err := startup.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rank: init:", err)
		os.Exit(1)
	}
	_, spare := c.Replaces()
	switch {
	case spare && o.mode == "replace":
		err = spareJoined(ctx, c, start)
	case spare && o.mode == "grow":
		err = growJoin(ctx, c, o)
	case spare:
		err = fmt.Errorf("started as a spare in mode %s", o.mode)
	case o.mode == "detect":
		err = detect(ctx, c, o)
	case o.mode == "replace":
		err = replace(ctx, c, o)
	case o.mode == "grow":
		err = grow(ctx, c, o)
	case o.mode == "coll":
		err = coll(ctx, c, o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", c.Rank(), err)
		c.Close()
		os.Exit(1)
	}
}

// out prints one line to stdout in a single write, so that lines of one rank
// never mix.
func out(format string, args ...any) {
	os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n")
}

// pause sleeps d between two looks at local state; d = 0 only yields the
// processor to other goroutines.
func pause(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
		return
	}
	runtime.Gosched()
}

func detect(ctx context.Context, c *comm.Comm, o options) error {
	if err := watch(ctx, c, o); err != nil {
		return err
	}
	// Leave together: a survivor that exited while another still watched
	// would look to that one like a second failure. The agreement completes
	// only when every survivor takes part, that is, once every survivor knew.
	c.AckFailed(c.Size())
	leave(ctx, c)
	return c.Close()
}

// leave runs the closing Agree on c, bounded by leaveTimeout; the
// measurement is done by then, so a failed agreement only prints a warning.
func leave(ctx context.Context, c *comm.Comm) {
	actx, cancel := context.WithTimeout(ctx, leaveTimeout)
	defer cancel()
	if _, err := c.Agree(actx, 1); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: warning: closing agreement: %v\n", c.Rank(), err)
	}
}

// watch is the common start of detect and replace: after a barrier the
// victim gives its pid and waits to be killed (it never returns nil); the
// others watch it and return once they know it failed, having printed
// "knew".
func watch(ctx context.Context, c *comm.Comm, o options) error {
	victim := ftrma.Rank(o.victim)
	if o.victim < 0 {
		victim = ftrma.Rank(c.Size() - 1)
	}
	if c.Size() < 2 || int(victim) >= c.Size() {
		return fmt.Errorf("%s needs at least 2 ranks and a victim below %d (victim %d)", o.mode, c.Size(), victim)
	}
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	if c.Rank() == victim {
		out("pid %d %d", c.Rank(), os.Getpid())
		select {
		case <-time.After(o.wait):
		case <-ctx.Done():
		}
		return fmt.Errorf("victim: not killed within %v", o.wait)
	}
	out("ready %d", c.Rank())
	for !c.ProcFailed(victim) {
		if ctx.Err() != nil {
			return fmt.Errorf("the failure of rank %d was never noticed: %w", victim, ctx.Err())
		}
		if o.poll > 0 {
			pause(o.poll)
			continue
		}
		// -poll 0: wait for the event, as a blocking ULFM call would
		// return its error.
		changed := c.FailuresChanged()
		if c.ProcFailed(victim) {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
		}
	}
	knew := time.Now().UnixNano()
	failed := c.Failed()
	out("knew %d %d", c.Rank(), knew)
	var others []string
	for _, r := range failed {
		if r != victim {
			others = append(others, strconv.Itoa(int(r)))
		}
	}
	if len(others) > 0 {
		out("alsofailed %d %s", c.Rank(), strings.Join(others, ","))
	}
	return nil
}

// leaveTimeout bounds the closing agreements of detect and replace.
const leaveTimeout = 10 * time.Second

// replace is a survivor's side of replace mode: once it knows of the
// failure it calls Replace and Shrink on the world, in the order o.first
// gives, and prints the times of each. The victim never returns nil.
func replace(ctx context.Context, c *comm.Comm, o options) error {
	if err := watch(ctx, c, o); err != nil {
		return err
	}
	var replaced, shrunk *comm.Comm
	ops := []string{"replace", "shrink"}
	if o.first == "shrink" {
		ops = []string{"shrink", "replace"}
	}
	for _, op := range ops {
		t0 := time.Now().UnixNano()
		var err error
		if op == "replace" {
			replaced, err = c.Replace(ctx)
		} else {
			shrunk, err = c.Shrink(ctx)
		}
		t1 := time.Now().UnixNano()
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		out("op %s %d %d %d", op, c.Rank(), t0, t1)
	}
	if replaced.Size() != c.Size() || replaced.Rank() != c.Rank() || shrunk.Size() != c.Size()-1 {
		return fmt.Errorf("replace gave rank %d of %d, shrink a communicator of %d; want %d of %d and %d",
			replaced.Rank(), replaced.Size(), shrunk.Size(), c.Rank(), c.Size(), c.Size()-1)
	}
	leave(ctx, replaced)
	replaced.Close()
	shrunk.Close()
	return c.Close()
}

// spareJoined is the spare's side of replace mode: Init (begun at start)
// has just returned the replaced communicator c.
func spareJoined(ctx context.Context, c *comm.Comm, start time.Time) error {
	out("op spareinit %d %d %d", c.Rank(), start.UnixNano(), time.Now().UnixNano())
	leave(ctx, c)
	return c.Close()
}

func growKey(i int) []byte { return fmt.Appendf(nil, "key-%06d", i) }

// growValue is key i's value: value bytes that name the key.
func growValue(i, value int) []byte {
	v := make([]byte, value)
	copy(v, growKey(i))
	for j := len(growKey(i)); j < value; j++ {
		v[j] = byte(i + j)
	}
	return v
}

// grow is a survivor's side of grow mode; the victim never returns nil.
func grow(ctx context.Context, c *comm.Comm, o options) error {
	s, err := store.Open(ctx, c, store.Config{Copies: o.copies})
	if err != nil {
		return fmt.Errorf("store open: %w", err)
	}
	for i := int(c.Rank()); i < o.keys; i += c.Size() {
		if err := s.Put(ctx, growKey(i), growValue(i, o.value)); err != nil {
			return fmt.Errorf("put %d: %w", i, err)
		}
	}
	if err := watch(ctx, c, o); err != nil {
		return err
	}
	nc, _, err := store.Respawn(ctx, s, c)
	if err != nil {
		return fmt.Errorf("respawn: %w", err)
	}
	st := s.Stats()
	t1 := time.Now().UnixNano()
	t0 := t1 - int64(st.GrowTime) // the Grow alone, without the Replace before it
	out("grow %d %d %d %d %d %d", c.Rank(), t0, t1, st.GrowKeys, st.GrowBytes, st.KeysHeld)
	if c.Rank() == 0 {
		for i := range o.keys {
			v, err := s.Get(ctx, growKey(i))
			if err != nil {
				return fmt.Errorf("get %d after grow: %w", i, err)
			}
			if !bytes.Equal(v, growValue(i, o.value)) {
				return fmt.Errorf("get %d after grow: wrong value", i)
			}
		}
	}
	leave(ctx, nc)
	if err := s.Close(ctx); err != nil { // closes nc too
		fmt.Fprintf(os.Stderr, "rank %d: warning: store close: %v\n", c.Rank(), err)
	}
	return c.Close()
}

// growJoin is the spare's side of grow mode: Init has returned the
// replaced communicator c.
func growJoin(ctx context.Context, c *comm.Comm, o options) error {
	t0 := time.Now().UnixNano()
	s, jc, err := store.JoinRespawned(ctx, c, store.Config{})
	if err != nil {
		return fmt.Errorf("store join: %w", err)
	}
	t1 := time.Now().UnixNano()
	st := s.Stats()
	out("grow %d %d %d %d %d %d", c.Rank(), t0, t1, st.GrowKeys, st.GrowBytes, st.KeysHeld)
	leave(ctx, jc)
	if err := s.Close(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: warning: store close: %v\n", c.Rank(), err)
	}
	return c.Close()
}

// agreeFlag is what rank r contributes to agreement number i: all ones but
// bit (r+i) mod 64, so that the AND over n ranks must clear exactly bits
// i..i+n-1 (mod 64), which checks every decision.
func agreeFlag(r ftrma.Rank, i int) uint64 { return ^uint64(0) &^ (1 << ((int(r) + i) % 64)) }

func agreeWant(n, i int) uint64 {
	v := ^uint64(0)
	for r := range min(n, 64) {
		v &^= 1 << ((r + i) % 64)
	}
	return v
}

func medianMillis(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	var m time.Duration
	if len(s)%2 == 1 {
		m = s[len(s)/2]
	} else {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return float64(m) / float64(time.Millisecond)
}

func coll(ctx context.Context, world *comm.Comm, o options) error {
	n := world.Size()
	me := world.Rank()
	if err := world.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}

	// agree_lat
	times := make([]time.Duration, 0, o.iters)
	for i := range o.warmup + o.iters {
		t0 := time.Now()
		v, err := world.Agree(ctx, agreeFlag(me, i))
		d := time.Since(t0)
		if err != nil {
			return fmt.Errorf("agree %d: %w", i, err)
		}
		if want := agreeWant(n, i); v != want {
			return fmt.Errorf("agree %d decided %#x, want %#x", i, v, want)
		}
		if i >= o.warmup {
			times = append(times, d)
		}
	}
	if me == 0 {
		out("RESULT agree_lat %d %.4f ms", n, medianMillis(times))
	}

	// shrink_lat: each Shrink on the previous result. The intermediate
	// communicators stay open: a slower rank may still need this rank's
	// part of an agreement this rank has already decided.
	times = times[:0]
	cur := world
	for i := range o.warmup + o.iters {
		// Untimed barrier on the world: every rank has created cur before
		// any rank starts agreeing on it. Without it a fast rank's first
		// agreement messages on a new communicator reach ranks that have
		// not created it yet, and comm drops them (the Shrink then hangs).
		if err := world.Barrier(ctx); err != nil {
			return fmt.Errorf("shrink %d: barrier: %w", i, err)
		}
		t0 := time.Now()
		next, err := cur.Shrink(ctx)
		d := time.Since(t0)
		if err != nil {
			return fmt.Errorf("shrink %d: %w", i, err)
		}
		if next.Size() != n || next.Rank() != me {
			return fmt.Errorf("shrink %d without failures gave rank %d of %d, want %d of %d", i, next.Rank(), next.Size(), me, n)
		}
		if i >= o.warmup {
			times = append(times, d)
		}
		cur = next
	}
	if me == 0 {
		out("RESULT shrink_lat %d %.4f ms", n, medianMillis(times))
	}

	// revoke rounds
	for round := range o.rounds {
		fresh, err := world.Shrink(ctx)
		if err != nil {
			return fmt.Errorf("revoke round %d: shrink: %w", round, err)
		}
		if fresh.IsRevoked() {
			return fmt.Errorf("revoke round %d: a fresh communicator is already revoked", round)
		}
		// The barrier may end in ErrRevoked at a rank that is still in it
		// when rank 0, already out, revokes: that rank has seen the
		// revocation, as ULFM allows.
		if err := fresh.Barrier(ctx); err != nil && !errors.Is(err, ftrma.ErrRevoked) {
			return fmt.Errorf("revoke round %d: barrier: %w", round, err)
		}
		if me == 0 {
			t0 := time.Now().UnixNano()
			fresh.Revoke()
			out("revoke %d t0 %d", round, t0)
		}
		select {
		case <-fresh.Revoked():
		case <-ctx.Done():
			return fmt.Errorf("revoke round %d: never saw the revocation: %w", round, ctx.Err())
		}
		out("revoke %d seen %d %d", round, me, time.Now().UnixNano())
	}
	// Everything is measured and printed by now. Finalize's barrier can
	// still fail when a rank that already left it exits and its exit notice
	// overtakes its last barrier message; that is reported, not fatal.
	if err := world.Finalize(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: warning: finalize: %v\n", me, err)
	}
	return nil
}
