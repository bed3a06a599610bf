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
	if len(args) < 4 {
		return errors.New("kvlin DIR DURATION COPIES KEYS [PACE [respawn]]")
	}
	respawn := len(args) > 5 && args[5] == "respawn"
	var pace time.Duration
	if len(args) > 4 {
		var err error
		if pace, err = time.ParseDuration(args[4]); err != nil {
			return err
		}
	}
	dir := args[0]
	dur, err := time.ParseDuration(args[1])
	if err != nil {
		return err
	}
	copies, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	nkeys, err := strconv.Atoi(args[3])
	if err != nil {
		return err
	}
	opt := store.Options{Copies: copies}
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
	world := c.TransportRank(c.Rank())
	end := time.Now().Add(dur)
	endKey := []byte("kvlin/end")
	switch {
	case replacement:
		b, err := s.Get(ctx, endKey)
		if err != nil {
			return fmt.Errorf("the run's end: %w", err)
		}
		at, _ := strconv.ParseInt(string(b), 10, 64)
		end = time.Unix(0, at)
	case respawn && c.Rank() == 0:
		if err := s.Put(ctx, endKey, strconv.AppendInt(nil, end.UnixNano(), 10)); err != nil {
			return err
		}
	}
	cur := c // the latest communicator (respawn), guarded by curMu
	var curMu sync.Mutex
	stopWatch := func() {}
	if respawn {
		stopWatch = watchReplace(ctx, c, s, func(nc *comm.Comm) {
			curMu.Lock()
			cur = nc
			curMu.Unlock()
		})
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("hist.%d", world)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var mu sync.Mutex
	opid := 0
	record := func(format string, a ...any) {
		mu.Lock()
		f.WriteString(fmt.Sprintf(format, a...) + "\n")
		mu.Unlock()
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "lin/%d", i) }
	var seen []string // values gets returned lately, for compare-and-swaps (guarded by mu)
	// one runs one recorded operation of client cl.
	one := func(cl int, kind string, k int, val string) {
		mu.Lock()
		opid++
		id := opid
		mu.Unlock()
		record("C %d %d %s %d %s %d", cl, id, kind, k, val, time.Now().UnixNano())
		var res, out string
		var err error
		switch kind {
		case "put":
			err = s.Put(ctx, key(k), []byte(val))
		case "del":
			err = s.Delete(ctx, key(k))
		case "get":
			var v []byte
			v, err = s.Get(ctx, key(k))
			out = string(v)
		case "cas": // val is OLD>NEW, OLD "-" for absent
			var old []byte
			o, n, _ := strings.Cut(val, ">")
			if o != "-" {
				old = []byte(o)
			}
			var ok bool
			ok, err = s.CompareAndSwap(ctx, key(k), old, []byte(n))
			out = strconv.FormatBool(ok)
		}
		switch {
		case err == nil:
			res = "ok"
		case errors.Is(err, store.ErrNotFound):
			res, err = "notfound", nil
		default:
			res = "err"
		}
		if out == "" {
			out = "-"
		}
		record("R %d %d %s %s %d", cl, id, res, out, time.Now().UnixNano())
		if kind == "get" && res == "ok" {
			mu.Lock()
			seen = append(seen[max(0, len(seen)-15):], out)
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for g := range 2 {
		cl := int(world)*2 + g
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(cl), uint64(time.Now().UnixNano())))
			for seq := 0; time.Now().Before(end); seq++ {
				if pace > 0 {
					time.Sleep(time.Duration(rng.Int64N(int64(pace))))
				}
				k := rng.IntN(nkeys)
				switch x := rng.IntN(10); {
				case x < 4:
					one(cl, "put", k, fmt.Sprintf("c%d.%d", cl, seq))
				case x < 5:
					one(cl, "del", k, "-")
				case x < 6:
					// From a value some client wrote lately (or absent):
					// both outcomes happen.
					old := "-"
					mu.Lock()
					if o := rng.IntN(2*len(seen) + 1); o < len(seen) {
						old = seen[o]
					}
					mu.Unlock()
					one(cl, "cas", k, fmt.Sprintf("%s>c%d.%d", old, cl, seq))
				default:
					one(cl, "get", k, "-")
				}
			}
		}()
	}
	wg.Wait()
	for k := range nkeys {
		one(int(world)*2, "get", k, "-")
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
	// Recovery can give a key no more replicas than there are live ranks.
	live := 0
	for r := range c.Size() {
		if !c.ProcFailed(ftrma.Rank(r)) {
			live++
		}
	}
	want := min(copies, live)
	for k := range nkeys {
		deadline := time.Now().Add(10 * time.Second)
		for {
			reps, err := s.Locate(ctx, key(k))
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
	s, err := store.Open(ctx, c, store.Options{Copies: 2})
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
