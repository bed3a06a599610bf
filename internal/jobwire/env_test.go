package jobwire

import (
	"runtime"
	"testing"
)

// The CPU rule: a host is full from as many ranks as CPUs on, and the ranks
// per CPU are rounded up. (The launcher's and startup's tests check that
// GOMAXPROCS, the detector timeout and busy-polling follow it.)
func TestCPUShare(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, local := range []int{1, cpus - 1, cpus, cpus + 1, 2 * cpus, 2*cpus + 1, 5 * cpus} {
		if local < 1 {
			continue
		}
		full, perCPU := CPUShare(local)
		if want := local >= cpus; full != want {
			t.Errorf("%d ranks on %d CPUs: full %v, want %v", local, cpus, full, want)
		}
		if want := max(1, (local+cpus-1)/cpus); perCPU != want {
			t.Errorf("%d ranks on %d CPUs: %d per CPU, want %d", local, cpus, perCPU, want)
		}
	}
}
