package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/store"
)

// snapKeys is how many keys each rank of snapcut puts.
const snapKeys = 40

// snapcut DIR DURATION: every rank opens a store (Copies 2, replicas on
// distinct hosts), puts snapKeys keys k/RANK/I = vRANK.I, says "ready PID",
// then snapshots under DIR until DURATION has passed, saying "snapshot CUT
// KEYS" after each (or the error), and "done" at the end. A test cuts a host
// off meanwhile: the survivors' snapshots must go on and hold every key.
func snapcut(ctx context.Context, c *comm.Comm, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("snapcut DIR DURATION")
	}
	d, err := time.ParseDuration(args[1])
	if err != nil {
		return err
	}
	s, err := store.Open(ctx, c, store.Config{Copies: 2})
	if err != nil {
		return err
	}
	for i := range snapKeys {
		if err := s.Put(ctx, fmt.Appendf(nil, "k/%d/%d", c.Rank(), i), fmt.Appendf(nil, "v%d.%d", c.Rank(), i)); err != nil {
			return err
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	fmt.Printf("ready %d\n", os.Getpid())
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		info, err := s.Snapshot(ctx, args[0])
		if err != nil {
			fmt.Printf("snapshot error: %v\n", err)
		} else {
			fmt.Printf("snapshot %d %d\n", info.Cut, info.Keys)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("done")
	return s.Close(ctx)
}

// snaprestore DIR RANKS: restores the store from the newest complete
// snapshot under DIR; rank 0 checks every key snapcut's RANKS ranks put and
// says "restored N keys from CUT".
func snaprestore(ctx context.Context, c *comm.Comm, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("snaprestore DIR RANKS")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	s, info, err := store.Restore(ctx, c, args[0], store.Config{Copies: 2})
	if err != nil {
		return err
	}
	if c.Rank() == 0 {
		got := 0
		for r := range n {
			for i := range snapKeys {
				v, err := s.Get(ctx, fmt.Appendf(nil, "k/%d/%d", r, i))
				if err != nil || string(v) != fmt.Sprintf("v%d.%d", r, i) {
					return fmt.Errorf("k/%d/%d restored as %q, %v", r, i, v, err)
				}
				got++
			}
		}
		fmt.Printf("restored %d keys from %d\n", got, info.Cut)
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return s.Close(ctx)
}
