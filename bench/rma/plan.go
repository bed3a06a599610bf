package main

import (
	"fmt"
	"strings"
)

// latStep is one message size of put_lat and get_lat.
type latStep struct {
	size, iters, warmup int
}

// plan is what both rank programs measure in one run. Its args are the same
// flags for bench/rma/rank (ftrma) and bench/rma/mpi/rma_bench.c (Open MPI).
type plan struct {
	lat                       []latStep
	atomicIters, atomicWarmup int // cas_lat and fadd_lat
	lockIters, lockWarmup     int // lock_lat
	rateSize, rateWindow      int // put_rate: rateWindow puts of rateSize bytes, then one flush
	rateBatches, rateWarmup   int
}

// quickSizes are the put/get sizes of -quick: small, medium and large.
var quickSizes = []int{8, 64, 1024, 16384, 65536, 1 << 20}

// newPlan returns the -quick plan or the full one. Iteration counts fall with
// size so that every size takes a similar, short time: one run of one system
// is meant to last a few seconds.
func newPlan(quick bool) plan {
	var p plan
	if quick {
		for _, s := range quickSizes {
			p.lat = append(p.lat, quickStep(s))
		}
		p.atomicIters, p.atomicWarmup = 2000, 200
		p.lockIters, p.lockWarmup = 1000, 100
		p.rateSize, p.rateWindow, p.rateBatches, p.rateWarmup = 8, 64, 1000, 100
		return p
	}
	for s := 8; s <= 1<<20; s *= 2 {
		p.lat = append(p.lat, fullStep(s))
	}
	p.atomicIters, p.atomicWarmup = 10000, 1000
	p.lockIters, p.lockWarmup = 5000, 500
	p.rateSize, p.rateWindow, p.rateBatches, p.rateWarmup = 8, 64, 5000, 500
	return p
}

// sharedMemoryScale multiplies every iteration count for the systems that
// move data through shared memory (sharedMemory): their operations take
// tens of nanoseconds, so the counts sized for TCP's tens of microseconds
// timed 100 µs loops, within which timer, cache and scheduler noise moved a
// median by a third from run to run.
const sharedMemoryScale = 100

// scaled returns p with every iteration and warm-up count multiplied by k.
func (p plan) scaled(k int) plan {
	lat := make([]latStep, len(p.lat))
	for i, s := range p.lat {
		lat[i] = latStep{s.size, k * s.iters, k * s.warmup}
	}
	p.lat = lat
	p.atomicIters, p.atomicWarmup = k*p.atomicIters, k*p.atomicWarmup
	p.lockIters, p.lockWarmup = k*p.lockIters, k*p.lockWarmup
	p.rateBatches, p.rateWarmup = k*p.rateBatches, k*p.rateWarmup
	return p
}

func quickStep(size int) latStep {
	switch {
	case size <= 1024:
		return latStep{size, 2000, 200}
	case size <= 16384:
		return latStep{size, 1000, 100}
	case size <= 65536:
		return latStep{size, 500, 50}
	default:
		return latStep{size, 100, 10}
	}
}

func fullStep(size int) latStep {
	switch {
	case size <= 8192:
		return latStep{size, 5000, 500}
	case size <= 65536:
		return latStep{size, 1000, 100}
	default:
		return latStep{size, 200, 20}
	}
}

// args renders p as rank-program flags.
func (p plan) args() []string {
	var lat []string
	for _, s := range p.lat {
		lat = append(lat, fmt.Sprintf("%d:%d:%d", s.size, s.iters, s.warmup))
	}
	var a []string
	if len(lat) > 0 {
		a = append(a, "-lat", strings.Join(lat, ","))
	}
	if p.atomicIters > 0 {
		a = append(a, "-atomic", fmt.Sprintf("%d:%d", p.atomicIters, p.atomicWarmup))
	}
	if p.lockIters > 0 {
		a = append(a, "-lock", fmt.Sprintf("%d:%d", p.lockIters, p.lockWarmup))
	}
	if p.rateBatches > 0 {
		a = append(a, "-rate", fmt.Sprintf("%d:%d:%d:%d", p.rateSize, p.rateWindow, p.rateBatches, p.rateWarmup))
	}
	return a
}

// expected is how many results one complete run prints.
func (p plan) expected() int {
	n := 2 * len(p.lat)
	if p.atomicIters > 0 {
		n += 2
	}
	if p.lockIters > 0 {
		n++
	}
	if p.rateBatches > 0 {
		n++
	}
	return n
}
