// Command testprog is a rank program for the end-to-end tests.
//
//	testprog intruder      rank 0 prints its transport address, waits until the
//	                       test has tried to break in, then all ranks move data
//	testprog fail-rank R   rank R exits with status 3
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/internal/rmacheck"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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
	c, err := comm.Init(ctx)
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
