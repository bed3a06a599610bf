package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
)

// replacehost is "testprog replacehost V": every rank passes a barrier and
// prints "ready PID"; rank V then waits to be lost with its host, and the
// others find the next barrier failed and call Replace. A spare that
// ftrun started (its Init returns Replace's communicator) prints
// "replaces W as rank R of N on HOST". On the new communicator every
// member gathers the members' hosts, and its rank 0 prints "members
// W@HOST ..." (world rank and host of each member, in rank order); all
// pass a barrier and print "done R of N".
func replacehost(ctx context.Context, c *comm.Comm, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("replacehost needs the rank lost with its host")
	}
	victim, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	nc := c
	if was, ok := c.Replaces(); ok {
		fmt.Printf("replaces %d as rank %d of %d on %s\n", was, c.Rank(), c.Size(), host)
	} else {
		if err := c.Barrier(ctx); err != nil {
			return fmt.Errorf("first barrier: %w", err)
		}
		fmt.Printf("ready %d\n", os.Getpid())
		if int(c.Rank()) == victim {
			<-ctx.Done() // killed with its host first
			return ctx.Err()
		}
		if err := c.Barrier(ctx); !errors.Is(err, ftrma.ErrProcFailed) {
			return fmt.Errorf("barrier after rank %d's host was lost: %v, want ErrProcFailed", victim, err)
		}
		if nc, err = c.Replace(ctx); err != nil {
			return fmt.Errorf("replace: %w", err)
		}
		defer nc.Close()
	}
	hosts, err := nc.Allgather(ctx, []byte(host))
	if err != nil {
		return fmt.Errorf("allgather on the new communicator: %w", err)
	}
	if nc.Rank() == 0 {
		m := make([]string, len(hosts))
		for r, h := range hosts {
			m[r] = fmt.Sprintf("%d@%s", nc.TransportRank(ftrma.Rank(r)), h)
		}
		fmt.Printf("members %s\n", strings.Join(m, " "))
	}
	if err := nc.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier on the new communicator: %w", err)
	}
	fmt.Printf("done %d of %d\n", nc.Rank(), nc.Size())
	return nil
}
