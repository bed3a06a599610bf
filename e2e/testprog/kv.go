package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/store"
)

// kvlin DIR DURATION COPIES KEYS [PACE [respawn]]: every rank runs two clients that put,
// get and delete random keys of a small shared set for DURATION, pausing up to
// PACE (default 0) between operations so that the history stays small enough
// to check on a fast transport, recording every
// call and return (wall-clock nanoseconds) in DIR/hist.RANK, one line each,
// written before the call and after the return so that a SIGKILL leaves
// calls without returns. Then each survivor reads every key once more, and
// the lowest survivor waits until recovery has given every key COPIES whole
// replicas (or one per live rank, if fewer) and prints "whole KEY n" lines.
//
// With "respawn" (under ftrun --respawn) a failure makes every survivor
// Replace the failed ranks and Grow the store onto the new communicator,
// while the clients go on; a replacement Joins the store and runs its
// clients until the others' end (rank 0 puts it in the store at the
// start). Clients are numbered by world rank, histories named by it.
func kvlin(ctx context.Context, c *comm.Comm, args []string) error {
	a, err := parseKvlin(args)
	if err != nil {
		return err
	}
	opt := store.Config{Copies: a.copies}
	var s *store.Store
	_, replacement := c.Replaces()
	if replacement {
		s, c, err = store.JoinRespawned(ctx, c, opt)
	} else {
		s, err = store.Open(ctx, c, opt)
	}
	if err != nil {
		return err
	}
	end, err := kvlinEnd(ctx, c, s, a, replacement)
	if err != nil {
		return err
	}
	cur := c // the latest communicator (respawn), guarded by curMu
	var curMu sync.Mutex
	stopWatch := func() {}
	if a.respawn {
		stopWatch = watchReplace(ctx, c, s, func(nc *comm.Comm) {
			curMu.Lock()
			cur = nc
			curMu.Unlock()
		})
	}
	world := c.TransportRank(c.Rank())
	h, err := newLinHistory(ctx, s, filepath.Join(a.dir, fmt.Sprintf("hist.%d", world)))
	if err != nil {
		return err
	}
	defer h.f.Close()
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.client(int(world)*2+g, a, end)
		}()
	}
	wg.Wait()
	for k := range a.keys {
		h.one(int(world)*2, "get", k, "-")
	}
	fmt.Printf("clients done\n")
	stopWatch()
	curMu.Lock()
	c = cur
	curMu.Unlock()
	// The lowest survivor checks that recovery made every key whole again;
	// the others wait for it (their memory holds replicas).
	defer survivorsMeet(ctx, c)
	for r := range c.Rank() {
		if !c.ProcFailed(r) {
			return nil
		}
	}
	return checkWhole(ctx, c, s, a)
}

// kvlinArgs are kvlin's arguments.
type kvlinArgs struct {
	dir     string
	dur     time.Duration
	copies  int
	keys    int
	pace    time.Duration
	respawn bool
}

func parseKvlin(args []string) (kvlinArgs, error) {
	var a kvlinArgs
	if len(args) < 4 {
		return a, errors.New("kvlin DIR DURATION COPIES KEYS [PACE [respawn]]")
	}
	a.dir = args[0]
	a.respawn = len(args) > 5 && args[5] == "respawn"
	var err error
	if len(args) > 4 {
		if a.pace, err = time.ParseDuration(args[4]); err != nil {
			return a, err
		}
	}
	if a.dur, err = time.ParseDuration(args[1]); err != nil {
		return a, err
	}
	if a.copies, err = strconv.Atoi(args[2]); err != nil {
		return a, err
	}
	a.keys, err = strconv.Atoi(args[3])
	return a, err
}

// kvlinEnd is when the clients stop: DURATION from now, or, in a
// replacement, the end rank 0 put in the store at the start (respawn).
func kvlinEnd(ctx context.Context, c *comm.Comm, s *store.Store, a kvlinArgs, replacement bool) (time.Time, error) {
	end := time.Now().Add(a.dur)
	endKey := []byte("kvlin/end")
	switch {
	case replacement:
		b, err := s.Get(ctx, endKey)
		if err != nil {
			return end, fmt.Errorf("the run's end: %w", err)
		}
		at, _ := strconv.ParseInt(string(b), 10, 64)
		return time.Unix(0, at), nil
	case a.respawn && c.Rank() == 0:
		return end, s.Put(ctx, endKey, strconv.AppendInt(nil, end.UnixNano(), 10))
	}
	return end, nil
}

// linHistory runs a rank's recorded operations on the store and writes
// their calls and returns to its history file.
type linHistory struct {
	ctx context.Context
	s   *store.Store
	f   *os.File

	mu   sync.Mutex // guards the fields below, and writes to f
	opid int
	seen []string // values gets returned lately, for compare-and-swaps
}

func newLinHistory(ctx context.Context, s *store.Store, path string) (*linHistory, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &linHistory{ctx: ctx, s: s, f: f}, nil
}

func (h *linHistory) record(format string, a ...any) {
	h.mu.Lock()
	h.f.WriteString(fmt.Sprintf(format, a...) + "\n")
	h.mu.Unlock()
}

func linKey(i int) []byte { return fmt.Appendf(nil, "lin/%d", i) }

// one runs one recorded operation of client cl: kind on key k with val
// (for "cas", OLD>NEW, OLD "-" for absent).
func (h *linHistory) one(cl int, kind string, k int, val string) {
	h.mu.Lock()
	h.opid++
	id := h.opid
	h.mu.Unlock()
	h.record("C %d %d %s %d %s %d", cl, id, kind, k, val, time.Now().UnixNano())
	out, err := h.apply(kind, linKey(k), val)
	res := "ok"
	switch {
	case err == nil:
	case errors.Is(err, store.ErrNotFound):
		res = "notfound"
	default:
		res = "err"
	}
	if out == "" {
		out = "-"
	}
	h.record("R %d %d %s %s %d", cl, id, res, out, time.Now().UnixNano())
	if kind == "get" && res == "ok" {
		h.mu.Lock()
		h.seen = append(h.seen[max(0, len(h.seen)-15):], out)
		h.mu.Unlock()
	}
}

// apply runs one operation on the store and returns what it read (get,
// cas), "" for nothing.
func (h *linHistory) apply(kind string, key []byte, val string) (string, error) {
	switch kind {
	case "put":
		return "", h.s.Put(h.ctx, key, []byte(val))
	case "del":
		return "", h.s.Delete(h.ctx, key)
	case "get":
		v, err := h.s.Get(h.ctx, key)
		return string(v), err
	case "cas":
		var old []byte
		o, n, _ := strings.Cut(val, ">")
		if o != "-" {
			old = []byte(o)
		}
		ok, err := h.s.CompareAndSwap(h.ctx, key, old, []byte(n))
		return strconv.FormatBool(ok), err
	}
	return "", fmt.Errorf("unknown operation %q", kind)
}

// client runs client cl's random operations until end.
func (h *linHistory) client(cl int, a kvlinArgs, end time.Time) {
	rng := rand.New(rand.NewPCG(uint64(cl), uint64(time.Now().UnixNano())))
	for seq := 0; time.Now().Before(end); seq++ {
		if a.pace > 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(a.pace))))
		}
		k := rng.IntN(a.keys)
		switch x := rng.IntN(10); {
		case x < 4:
			h.one(cl, "put", k, fmt.Sprintf("c%d.%d", cl, seq))
		case x < 5:
			h.one(cl, "del", k, "-")
		case x < 6:
			// From a value some client wrote lately (or absent): both
			// outcomes happen.
			old := "-"
			h.mu.Lock()
			if o := rng.IntN(2*len(h.seen) + 1); o < len(h.seen) {
				old = h.seen[o]
			}
			h.mu.Unlock()
			h.one(cl, "cas", k, fmt.Sprintf("%s>c%d.%d", old, cl, seq))
		default:
			h.one(cl, "get", k, "-")
		}
	}
}

// checkWhole waits until every key has COPIES whole replicas on live ranks
// (at most one per live rank: recovery can give no more), up to 10 s a
// key, and prints "whole KEY n" for each.
func checkWhole(ctx context.Context, c *comm.Comm, s *store.Store, a kvlinArgs) error {
	live := 0
	for r := range c.Size() {
		if !c.ProcFailed(ftrma.Rank(r)) {
			live++
		}
	}
	want := min(a.copies, live)
	for k := range a.keys {
		deadline := time.Now().Add(10 * time.Second)
		for {
			reps, err := s.Locate(ctx, linKey(k))
			if err != nil {
				return err
			}
			whole := 0
			for _, p := range reps {
				if p.Complete && p.Version == reps[0].Version && !c.ProcFailed(p.Rank) {
					whole++
				}
			}
			if whole == want || time.Now().After(deadline) {
				fmt.Printf("whole %d %d\n", k, whole)
				if whole != want {
					fmt.Printf("replicas of key %d: %+v\n", k, reps)
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// kvpause VICTIM PARTNER DURATION: copies 2. Rank VICTIM keeps putting keys
// replicated on itself and PARTNER; every other rank keeps putting keys of
// its own whose replicas avoid VICTIM, recording each put's latency, until
// DURATION has passed. The test kills VICTIM meanwhile. Each uninvolved rank
// prints "pause MAXUS P50US N" for its puts from the kill on (the first put
// after ftrun's kill time is taken from the failure becoming known) and
// "before MAXUS P50US N" for those before.
func kvpause(ctx context.Context, c *comm.Comm, args []string) error {
	if len(args) < 3 {
		return errors.New("kvpause VICTIM PARTNER DURATION")
	}
	victim, err1 := strconv.Atoi(args[0])
	partner, err2 := strconv.Atoi(args[1])
	dur, err3 := time.ParseDuration(args[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	s, err := store.Open(ctx, c, store.Config{Copies: 2})
	if err != nil {
		return err
	}
	me := int(c.Rank())
	// Choose 8 keys whose replicas suit this rank's role.
	var keys [][]byte
	for i := 0; len(keys) < 8; i++ {
		k := fmt.Appendf(nil, "pause/%d/%d", me, i)
		reps, err := s.Locate(ctx, k)
		if err != nil {
			return err
		}
		ranks := []int{int(reps[0].Rank), int(reps[1].Rank)}
		onVictim, onPartner := slices.Contains(ranks, victim), slices.Contains(ranks, partner)
		if me == victim && onVictim && onPartner || me != victim && !onVictim && !onPartner {
			keys = append(keys, k)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if me == victim {
		fmt.Printf("pid %d\n", os.Getpid())
	}
	type sample struct {
		at time.Time
		d  time.Duration
	}
	var samples []sample
	var failedAt time.Time
	val := bytes.Repeat([]byte{byte(me)}, 256)
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end); i++ {
		t := time.Now()
		if err := s.Put(ctx, keys[i%len(keys)], val); err != nil {
			return fmt.Errorf("put: %w", err)
		}
		samples = append(samples, sample{t, time.Since(t)})
		if failedAt.IsZero() && c.ProcFailed(ftrma.Rank(victim)) {
			failedAt = time.Now()
		}
	}
	defer survivorsMeet(ctx, c)
	if me == victim || me == partner {
		return nil
	}
	if failedAt.IsZero() {
		return errors.New("the victim never failed")
	}
	// Puts from 200 ms before the failure was known (the kill) on.
	cut := failedAt.Add(-200 * time.Millisecond)
	report := func(name string, keep func(sample) bool) {
		var ds []time.Duration
		for _, x := range samples {
			if keep(x) {
				ds = append(ds, x.d)
			}
		}
		slices.Sort(ds)
		if len(ds) == 0 {
			fmt.Printf("%s 0 0 0\n", name)
			return
		}
		fmt.Printf("%s %d %d %d\n", name, ds[len(ds)-1].Microseconds(), ds[len(ds)/2].Microseconds(), len(ds))
	}
	report("before", func(x sample) bool { return x.at.Before(cut) })
	report("pause", func(x sample) bool { return !x.at.Before(cut) })
	return nil
}

// survivorsMeet returns once every surviving rank has called it: the
// fault-tolerant agreement, which works across failures, as a barrier.
// watchReplace is kvlin's respawn: on each failure of the current
// communicator it replaces the failed ranks and grows s onto the new
// communicator (store.Respawn), then calls set. The returned stop waits
// until no failure of the current communicator is left unreplaced (every
// survivor takes part in each Replace, so each waits for the same ones),
// then ends the watch. A Respawn that fails (no spare left) ends the
// watch too.
func watchReplace(ctx context.Context, c *comm.Comm, s *store.Store, set func(*comm.Comm)) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			changed := c.FailuresChanged()
			if len(c.Failed()) > 0 {
				nc, _, err := store.Respawn(ctx, s, c)
				grew := nc != c
				c = nc
				set(nc)
				if err != nil {
					fmt.Fprintf(os.Stderr, "respawn: %v\n", err)
					return
				}
				if grew {
					fmt.Printf("replaced: %d ranks now\n", nc.Size())
					continue
				}
			}
			select {
			case <-changed:
			case <-quit:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

func survivorsMeet(ctx context.Context, c *comm.Comm) {
	c.AckFailed(c.Size())
	c.Agree(ctx, 1)
}
