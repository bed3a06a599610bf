// Command rmademo is ftrma's first end-to-end program: run under ftrun, every
// rank hammers counters at rank 0 with compare-and-swap loops, FetchAndOp and
// lock-protected read-modify-writes, moves data through a third rank, and the
// program prints the verified totals.
//
//	ftrun --oversubscribe -n 4 --tag-output rmademo
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/window/rmacheck"
)

func main() {
	iters := flag.Int("iters", 1000, "CAS-loop and FetchAndOp increments per rank")
	rounds := flag.Int("rounds", 200, "lock/get/put/unlock rounds per rank")
	maxSize := flag.Int("max-size", 1<<20, "largest put/get through a third rank, in bytes")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *iters, *rounds, *maxSize); err != nil {
		fmt.Fprintln(os.Stderr, "rmademo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, iters, rounds, maxSize int) error {
	c, err := startup.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	start := time.Now()
	cas, fao, err := rmacheck.Counters(ctx, c, iters)
	if err != nil {
		return err
	}
	locked, err := rmacheck.LockedCounter(ctx, c, rounds)
	if err != nil {
		return err
	}
	var sizes []int
	for s := 1; s <= maxSize; s *= 4 {
		sizes = append(sizes, s)
	}
	if c.Size() >= 3 {
		if err := rmacheck.PutGetThird(ctx, c, sizes); err != nil {
			return err
		}
	}
	if c.Rank() == 0 {
		fmt.Printf("verified: %d ranks; CAS-loop counter %d, FetchAndOp counter %d (want %d each); locked counter %d (want %d); put/get through a third rank of %d sizes up to %d B; %.2fs\n",
			c.Size(), cas, fao, c.Size()*iters, locked, c.Size()*rounds, len(sizes), maxSize, time.Since(start).Seconds())
	}
	return c.Finalize(ctx)
}
