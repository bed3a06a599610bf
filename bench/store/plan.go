package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// plan is what one invocation measures.
type plan struct {
	quick      bool
	sizes      []int // value sizes in bytes
	copies     []int // copy counts, ascending
	writers    int   // concurrent writers in the client process
	keys       int   // keys per writer
	warmup     int   // untimed puts per writer before each run's timed puts (at 64 B; see workload)
	puts       int   // timed puts per writer per run (at 64 B; see workload)
	gets       int   // timed gets per writer per run
	rounds     int   // runs of every (system, size) per copy count
	stageWarm  time.Duration
	opTimeout  time.Duration
	runTimeout time.Duration
}

func newPlan(quick bool) plan {
	p := plan{
		quick:      quick,
		sizes:      []int{64, 1024, 4096, 65536, 1 << 20},
		copies:     []int{1, 2, 3, 4, 5, 6},
		writers:    8,
		keys:       16,
		warmup:     100,
		puts:       1000,
		gets:       200,
		rounds:     7,
		stageWarm:  5 * time.Second,
		opTimeout:  10 * time.Second,
		runTimeout: 5 * time.Minute,
	}
	if quick {
		p.sizes = []int{64, 4096}
		p.copies = []int{1, 2, 3, 6}
		p.warmup = 50
		p.puts = 400
		p.gets = 100
		p.rounds = 5
		p.stageWarm = 2 * time.Second
		p.runTimeout = time.Minute
	}
	return p
}

// workload returns the workload of one run at the given value size. Large
// values get fewer operations, so that a run stays short: the full count up
// to 16 KiB, a quarter up to 256 KiB, a tenth above (never fewer than 2*keys).
func (p plan) workload(size int) workload {
	scale := func(n int) int {
		switch {
		case size > 256<<10:
			n /= 10
		case size > 16<<10:
			n /= 4
		}
		return n
	}
	wl := workload{
		Writers:       p.writers,
		KeysPerWriter: p.keys,
		Size:          size,
		Warmup:        scale(p.warmup),
		Puts:          max(scale(p.puts), 2*p.keys),
		Gets:          max(scale(p.gets), p.keys),
		OpTimeout:     p.opTimeout,
	}
	return wl
}

// describe renders the plan for the output's first lines.
func (p plan) describe() string {
	mode := "full"
	if p.quick {
		mode = "quick"
	}
	var sz []string
	for _, s := range p.sizes {
		wl := p.workload(s)
		sz = append(sz, fmt.Sprintf("%s (%d+%d puts, %d gets per writer)", sizeName(s), wl.Warmup, wl.Puts, wl.Gets))
	}
	return fmt.Sprintf("plan (%s): copies %s; %d writers in one client process, %d keys each; value sizes %s; %d rounds per copy count; %v of untimed puts per system at each copy count before its first round (3x for Hazelcast)",
		mode, joinInts(p.copies, ","), p.writers, p.keys, strings.Join(sz, ", "), p.rounds, p.stageWarm)
}

// parseInts parses a comma-separated list of positive integers, with
// optional K/M suffixes (powers of 1024), e.g. "64,4K,1M".
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mul := 1
		switch {
		case strings.HasSuffix(f, "K"), strings.HasSuffix(f, "k"):
			mul, f = 1<<10, f[:len(f)-1]
		case strings.HasSuffix(f, "M"), strings.HasSuffix(f, "m"):
			mul, f = 1<<20, f[:len(f)-1]
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n*mul)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list %q", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func joinInts(xs []int, sep string) string {
	var s []string
	for _, x := range xs {
		s = append(s, strconv.Itoa(x))
	}
	return strings.Join(s, sep)
}

// sizeName renders a byte count: 64 B, 4 KiB, 1 MiB.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
