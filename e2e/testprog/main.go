// Command testprog is a rank program for the end-to-end tests.
//
//	testprog intruder      rank 0 prints its transport address, waits until the
//	                       test has tried to break in, then all ranks move data
//	testprog fail-rank R   rank R exits with status 3
//	testprog hammer T...   every rank but the targets T hammers put/flush, CAS,
//	                       fetch-and-add and lock/unlock at the first target
//	                       until an operation fails, prints when ("detected
//	                       UNIXNANO ERR"), then all survivors agree, shrink and
//	                       verify counters on the survivors; the targets print
//	                       "pid PID" and wait to be killed
//	testprog lockholder H  rank H takes an exclusive lock on rank 0's window,
//	                       prints "locked" and waits to be killed; the others
//	                       then wait for that lock and print "acquired"
//	testprog shrinkloop K N  every rank shrinks the world over and over, at least
//	                       K times and until N ranks are left (ranks die
//	                       meanwhile), then verifies counters on the result
//	testprog idle D        every rank does light RMA traffic for duration D and
//	                       prints how many ranks it saw fail ("failed N")
//	testprog watchfail D [DIR]  as idle, and every rank prints "learned R
//	                       UNIXNANO" when it learns of rank R's failure
//	                       (polled every 10 ms); "ready PID" once its window
//	                       exists; with DIR, a rank that loses its lease from
//	                       ftrun writes the time to DIR/stopped-RANK and exits
//	testprog putlat N      rank 0 times N puts of 8 bytes + flush to every
//	                       other rank and prints "putlat R MEDIAN_NS" per rank
//	testprog kvlin DIR DURATION COPIES KEYS   store clients recording a history
//	                       for the linearizability check (see kv.go)
//	testprog kvpause VICTIM PARTNER DURATION  put latency of ranks that share
//	                       no key with a rank killed meanwhile (see kv.go)
//	testprog stopped V     rank V prints "pid PID" and then keeps writing into
//	                       every other rank's window; the others watch their
//	                       windows: once V is declared failed (the test stops
//	                       V with SIGSTOP), nothing of V's may land
//	testprog replacehost V  rank V waits to be lost with its host; the others
//	                       Replace it (ftrun --respawn) and print the new
//	                       communicator's world ranks and hosts (see replace.go)
//	testprog bigmove SIZE ROUNDS  rank 0 puts SIZE bytes into rank 1's window
//	                       and gets them back, ROUNDS times, checking them;
//	                       every rank prints "bigmove failed N" (see bigmove.go)
//	testprog outwait FILE  every rank prints "ready PID", waits until FILE
//	                       exists, prints "saw FILE" and ends
//	testprog routes        every rank prints "routes host=HOSTNAME R0,R1,.."
//	                       (the transport reaching each rank, from its
//	                       transport's Route, or "single") and "env
//	                       ROUTES_TAG=VALUE", then counters,
//	                       locks, puts and gets over every path; rank 0
//	                       prints "routes verified"
//	testprog snapcut DIR D  a store snapshotted under DIR over and over for
//	                       duration D while a test cuts a host off; testprog
//	                       snaprestore DIR N restores it and checks every key
//	                       (see snap.go)
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/window"
	"github.com/ftrma/ftrma/window/rmacheck"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testprog:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: testprog intruder | fail-rank R")
	}
	cfg := startup.JobConfig()
	if args[0] == "watchfail" && len(args) > 2 {
		// A rank that loses its lease leaves the time in DIR (which the
		// test reads even when this host is cut off), then exits as
		// comm's default does.
		dir := args[2]
		cfg.OnLostPrimary = func() {
			os.WriteFile(filepath.Join(dir, "stopped-"+os.Getenv("FTRMA_RANK")), []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o644)
			os.Exit(comm.ExitLostPrimary)
		}
	}
	c, err := startup.InitConfig(ctx, cfg)
	if errors.Is(err, comm.ErrReplace) {
		// A spare whose Replace was called off: a live rank in no
		// communicator, with nothing to do.
		fmt.Printf("its replace was called off: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer c.Close()
	switch args[0] {
	case "intruder":
		if c.Rank() == 0 {
			a, ok := c.Transport().(interface{ Addr() string })
			if !ok {
				return fmt.Errorf("transport has no address")
			}
			fmt.Printf("address %s\n", a.Addr())
			for {
				if _, err := os.Stat(filepath.Join(".", "intruded")); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if _, _, err := rmacheck.Counters(ctx, c, 100); err != nil {
			return err
		}
		if err := rmacheck.PutGetThird(ctx, c, []int{1, 4096, 1 << 20}); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Println("intruder test verified")
		}
	case "routes":
		return routes(ctx, c)
	case "hammer":
		return hammer(ctx, c, args[1:])
	case "stopped":
		return stopped(ctx, c, args[1:])
	case "lockholder":
		return lockholder(ctx, c, args[1:])
	case "shrinkloop":
		return shrinkloop(ctx, c, args[1:])
	case "idle":
		return idle(ctx, c, args[1:])
	case "watchfail":
		return watchfail(ctx, c, args[1:])
	case "putlat":
		return putlat(ctx, c, args[1:])
	case "secretput":
		return secretput(ctx, c, args[1:])
	case "kvlin":
		return kvlin(ctx, c, args[1:])
	case "kvpause":
		return kvpause(ctx, c, args[1:])
	case "replacehost":
		return replacehost(ctx, c, args[1:])
	case "sharedkill":
		return sharedkill(ctx, c, args[1:])
	case "snapcut":
		return snapcut(ctx, c, args[1:])
	case "snaprestore":
		return snaprestore(ctx, c, args[1:])
	case "bigmove":
		if err := bigmove(ctx, c, args[1:]); err != nil {
			return err
		}
	case "outwait":
		if err := outwait(ctx, args[1:]); err != nil {
			return err
		}
	case "fail-rank":
		if len(args) < 2 {
			return fmt.Errorf("fail-rank needs a rank")
		}
		r, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		if int(c.Rank()) == r {
			os.Exit(3)
		}
		return nil
	default:
		return fmt.Errorf("unknown mode %q", args[0])
	}
	return c.Finalize(ctx)
}

func ranks(args []string) ([]ftrma.Rank, error) {
	var out []ftrma.Rank
	for _, a := range args {
		r, err := strconv.Atoi(a)
		if err != nil {
			return nil, fmt.Errorf("bad rank %q", a)
		}
		out = append(out, ftrma.Rank(r))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no target rank")
	}
	return out, nil
}

func hammer(ctx context.Context, c *comm.Comm, args []string) error {
	targets, err := ranks(args)
	if err != nil {
		return err
	}
	w, err := window.Allocate(ctx, c, 64)
	if err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if slices.Contains(targets, c.Rank()) {
		fmt.Printf("pid %d\n", os.Getpid())
		<-ctx.Done() // killed by the test
		return ctx.Err()
	}
	t := targets[0]
	var old int64
	buf := make([]byte, 8)
	for i := 0; ; i++ {
		var err error
		switch i % 4 {
		case 0:
			if err = w.Put(t, 8, buf); err == nil {
				err = w.Flush(ctx, t)
			}
		case 1:
			if err = w.CompareAndSwap(t, 0, old, old+1, &old); err == nil {
				err = w.Flush(ctx, t)
			}
		case 2:
			if err = w.FetchAndOp(t, 16, 1, &old, window.Sum); err == nil {
				err = w.Flush(ctx, t)
			}
		case 3:
			if err = w.Lock(ctx, t, window.Exclusive); err == nil {
				err = w.Unlock(ctx, t)
			}
		}
		if err != nil {
			fmt.Printf("detected %d after %d operations: %v\n", time.Now().UnixNano(), i, err)
			if !errors.Is(err, ftrma.ErrProcFailed) {
				return fmt.Errorf("hammering rank %d: %w, want ErrProcFailed", t, err)
			}
			break
		}
	}
	c.AckFailed(c.Size())
	if _, err := c.Agree(ctx, 1); err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		return fmt.Errorf("agree: %w", err)
	}
	nc, err := c.Shrink(ctx)
	if err != nil {
		return fmt.Errorf("shrink: %w", err)
	}
	if _, _, err := rmacheck.Counters(ctx, nc, 200); err != nil {
		return fmt.Errorf("after shrink: %w", err)
	}
	if nc.Rank() == 0 {
		fmt.Printf("recovered: %d ranks, failed %v\n", nc.Size(), c.Failed())
	}
	return nc.Barrier(ctx)
}

// stopped: rank V writes its marker into the others' windows until it is
// declared failed; the others check that after they learned of V's failure
// (and the window memory was snapshotted), nothing changes any more.
func stopped(ctx context.Context, c *comm.Comm, args []string) error {
	vs, err := ranks(args)
	if err != nil {
		return err
	}
	v := vs[0]
	w, err := window.Allocate(ctx, c, 8*1024)
	if err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Rank() == v {
		fmt.Printf("pid %d\n", os.Getpid())
		buf := make([]byte, 8)
		for i := uint64(1); ; i++ {
			binary.LittleEndian.PutUint64(buf, i)
			for r := range c.Size() {
				if ftrma.Rank(r) != v {
					w.Put(ftrma.Rank(r), 8*(i%1024), buf) // unflushed: queued writes
				}
			}
			if i%64 == 0 {
				for r := range c.Size() {
					if ftrma.Rank(r) != v {
						w.Flush(ctx, ftrma.Rank(r))
					}
				}
			}
		}
	}
	for !c.ProcFailed(v) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("rank %d never declared failed: %w", v, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	snap := slices.Clone(w.Bytes())
	fmt.Printf("declared %d\n", time.Now().UnixNano())
	// The test resumes V now and it may try to write; give it time to.
	time.Sleep(2 * time.Second)
	if !slices.Equal(snap, w.Bytes()) {
		return fmt.Errorf("rank %d's writes landed after it was declared failed", v)
	}
	fmt.Println("fenced: memory unchanged")
	return nil
}

func lockholder(ctx context.Context, c *comm.Comm, args []string) error {
	hs, err := ranks(args)
	if err != nil {
		return err
	}
	w, err := window.Allocate(ctx, c, 8)
	if err != nil {
		return err
	}
	if c.Rank() == hs[0] {
		if err := w.Lock(ctx, 0, window.Exclusive); err != nil {
			return err
		}
		fmt.Println("locked")
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Rank() == hs[0] {
		<-ctx.Done() // killed by the test, holding the lock
		return ctx.Err()
	}
	if err := w.Lock(ctx, 0, window.Exclusive); err != nil {
		return fmt.Errorf("lock held by the killed rank %d: %w", hs[0], err)
	}
	// Whoever learned of the failure first broke the lock; the others may get
	// it from a survivor afterwards, before they themselves heard.
	fmt.Printf("acquired the lock rank %d held (it is known failed here: %v)\n", hs[0], c.ProcFailed(hs[0]))
	if err := w.Unlock(ctx, 0); err != nil {
		return err
	}
	// Rank 0 must stay until everyone had the lock: a barrier that survives
	// the dead rank.
	if _, err := c.Agree(ctx, 1); err != nil && !errors.Is(err, ftrma.ErrProcFailed) {
		return err
	}
	return nil
}

func shrinkloop(ctx context.Context, c *comm.Comm, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("shrinkloop K N: shrink at least K times, until N ranks are left")
	}
	k, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	cur := c
	i := 0
	// The sizes are agreed, so every rank stops after the same Shrink.
	for ; i < k || cur.Size() > n; i++ {
		nc, err := cur.Shrink(ctx)
		if err != nil {
			return fmt.Errorf("shrink %d: %w", i, err)
		}
		cur = nc
	}
	k = i
	if _, _, err := rmacheck.Counters(ctx, cur, 100); err != nil {
		return fmt.Errorf("after %d shrinks: %w", k, err)
	}
	if cur.Rank() == 0 {
		fmt.Printf("shrunk %d times: %d ranks, failed %v\n", k, cur.Size(), c.Failed())
	}
	return cur.Barrier(ctx)
}

func idle(ctx context.Context, c *comm.Comm, args []string) error {
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return err
	}
	w, err := window.Allocate(ctx, c, 8)
	if err != nil {
		return err
	}
	end := time.Now().Add(d)
	var old int64
	for time.Now().Before(end) {
		t := ftrma.Rank((int(c.Rank()) + 1) % c.Size())
		if err := w.FetchAndOp(t, 0, 1, &old, window.Sum); err != nil {
			return err
		}
		if err := w.Flush(ctx, t); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("failed %d\n", len(c.Failed()))
	return c.Barrier(ctx)
}

func watchfail(ctx context.Context, c *comm.Comm, args []string) error {
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return err
	}
	w, err := window.Allocate(ctx, c, 8)
	if err != nil {
		return err
	}
	fmt.Printf("ready %d\n", os.Getpid())
	seen := map[ftrma.Rank]bool{}
	end := time.Now().Add(d)
	var old int64
	for time.Now().Before(end) {
		for _, r := range c.Failed() {
			if !seen[r] {
				seen[r] = true
				fmt.Printf("learned %d %d\n", r, time.Now().UnixNano())
			}
		}
		// Light traffic to the next live rank.
		for i := 1; i < c.Size(); i++ {
			t := ftrma.Rank((int(c.Rank()) + i) % c.Size())
			if !seen[t] {
				if w.FetchAndOp(t, 0, 1, &old, window.Sum) == nil {
					w.Flush(ctx, t)
				}
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("failed %d\n", len(c.Failed()))
	// Nobody leaves before everybody stopped watching (a departure shows
	// in Failed too); the ranks' loops end within their start-up spread.
	time.Sleep(time.Second)
	return nil
}

// secretput: rank 0 puts PATTERN into rank 1's window, flushed, 200
// times (what a sniffer between their hosts must not read), and rank 1
// checks after a barrier that it landed.
func secretput(ctx context.Context, c *comm.Comm, args []string) error {
	if len(args) != 1 || c.Size() < 2 {
		return fmt.Errorf("secretput PATTERN, with 2 ranks at least")
	}
	pattern := []byte(args[0])
	w, err := window.Allocate(ctx, c, len(pattern))
	if err != nil {
		return err
	}
	if c.Rank() == 0 {
		for range 200 {
			if err := w.Put(1, 0, pattern); err != nil {
				return err
			}
			if err := w.Flush(ctx, 1); err != nil {
				return err
			}
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Rank() == 1 {
		if got := w.Bytes(); string(got) != string(pattern) {
			return fmt.Errorf("secretput: rank 1 holds %q", got)
		}
		fmt.Println("secretput verified")
	}
	return w.Free(ctx)
}

func putlat(ctx context.Context, c *comm.Comm, args []string) error {
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 {
		return fmt.Errorf("putlat: bad count %q", args[0])
	}
	w, err := window.Allocate(ctx, c, 8)
	if err != nil {
		return err
	}
	if c.Rank() == 0 {
		buf := make([]byte, 8)
		for r := 1; r < c.Size(); r++ {
			t := make([]time.Duration, n)
			for i := range t {
				start := time.Now()
				if err := w.Put(ftrma.Rank(r), 0, buf); err != nil {
					return err
				}
				if err := w.Flush(ctx, ftrma.Rank(r)); err != nil {
					return err
				}
				t[i] = time.Since(start)
			}
			slices.Sort(t)
			fmt.Printf("putlat %d %d\n", r, t[n/2].Nanoseconds())
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

func outwait(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("outwait needs a file")
	}
	fmt.Printf("ready %d\n", os.Getpid())
	for {
		if _, err := os.Stat(args[0]); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	fmt.Printf("saw %s\n", filepath.Base(args[0]))
	return nil
}

// routes prints which transport reaches each rank, then checks counters,
// locks, puts and gets between every pair of ranks.
func routes(ctx context.Context, c *comm.Comm) error {
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	names := make([]string, c.Size())
	rt, ok := c.Transport().(interface{ Route(ftrma.Rank) string })
	for r := range names {
		names[r] = "single"
		if ok {
			names[r] = rt.Route(ftrma.Rank(r))
		}
	}
	fmt.Printf("routes host=%s %s\n", host, strings.Join(names, ","))
	fmt.Printf("env ROUTES_TAG=%q\n", os.Getenv("ROUTES_TAG"))
	if _, _, err := rmacheck.Counters(ctx, c, 100); err != nil {
		return err
	}
	if err := rmacheck.PutGetThird(ctx, c, []int{8, 4096, 1 << 20}); err != nil {
		return err
	}
	if c.Rank() == 0 {
		fmt.Println("routes verified")
	}
	return nil
}
