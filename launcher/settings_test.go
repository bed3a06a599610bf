package launcher

import (
	"runtime"
	"testing"
	"time"

	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/jobwire"
)

// ftrun's host layer stretches by the same numbers as the ranks' detector
// (failure's presets): the lease of a job of n local ranks with the default
// detector is the lease term times DefaultLocalConfig's timeout over the
// default one, and GOMAXPROCS and the stretch follow the same rule.
func TestHostTimingFollowsDetectorPresets(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, local := range []int{1, cpus, cpus + 1, 2*cpus + 1, 128 * cpus} {
		o := &Options{cpuStretch: failure.RanksPerCPU(local, cpus)}
		stretch := failure.DefaultLocalConfig(local, cpus).Timeout / failure.DefaultTimeout
		if tm := timingFor(o); tm.lease != time.Duration(stretch)*jobwire.LeaseTerm {
			t.Errorf("%d ranks on %d CPUs: lease %v, want %v (the detector's stretch %d)", local, cpus, tm.lease, time.Duration(stretch)*jobwire.LeaseTerm, stretch)
		}
		if _, perCPU := jobwire.CPUShare(local); perCPU != int(stretch) {
			t.Errorf("%d ranks on %d CPUs: jobwire.CPUShare gives %d ranks per CPU, the detector %d", local, cpus, perCPU, stretch)
		}
	}
	// A period given alone stretches the detector timeout to three
	// periods, and the host layer with it.
	o := &Options{HBPeriod: 100 * time.Millisecond}
	want := o.detector().ForHost(1, cpus).Timeout // 300ms
	if tm := timingFor(o); tm.scale != float64(want)/float64(failure.DefaultTimeout) || want != 300*time.Millisecond {
		t.Errorf("--hb-period 100ms: host timing scale %v, detector timeout %v", tm.scale, want)
	}
}
