package launcher

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
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
		o := &Config{cpuStretch: failure.RanksPerCPU(local, cpus)}
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
	o := &Config{HBPeriod: 100 * time.Millisecond}
	want := o.detector().ForHost(1, cpus).Timeout // 300ms
	if tm := timingFor(o); tm.scale != float64(want)/float64(failure.DefaultTimeout) || want != 300*time.Millisecond {
		t.Errorf("--hb-period 100ms: host timing scale %v, detector timeout %v", tm.scale, want)
	}
}

// Without a hostfile, host list or allocation, this host has one slot per
// CPU: more ranks are refused, naming the limit and the flag, unless
// --oversubscribe; even then not more than MapRanks places.
func TestLocalSlots(t *testing.T) {
	old := localSlots
	t.Cleanup(func() { localSlots = old })
	localSlots = func() int { return 2 }
	t.Setenv("SLURM_JOB_ID", "")
	for _, c := range []struct {
		n     int
		over  bool
		error string
	}{
		{1, false, ""},
		{2, false, ""},
		{3, false, "there are not enough slots available: 3 ranks asked for, 2 slots on this host (one per CPU); use --oversubscribe"},
		{100000, false, "100000 ranks asked for, 2 slots"},
		{3, true, ""},
		{256, true, ""},
		{maxPlacedRanks + 1, true, "want 1 to"},
	} {
		o := &Config{N: c.n, Oversubscribe: c.over}
		blocks, err := planHosts(o)
		switch {
		case c.error == "" && err != nil:
			t.Errorf("-n %d, oversubscribe %v: %v", c.n, c.over, err)
		case c.error == "" && (len(blocks) != 1 || len(blocks[0].ranks) != c.n):
			t.Errorf("-n %d, oversubscribe %v: placed %d blocks", c.n, c.over, len(blocks))
		case c.error != "" && (err == nil || !strings.Contains(err.Error(), c.error) || !errors.Is(err, ftrma.ErrInvalid)):
			t.Errorf("-n %d, oversubscribe %v: error %v, want an ErrInvalid containing %q", c.n, c.over, err, c.error)
		}
	}
	// The command line: ftrun refuses to launch, and says why.
	var out, errs bytes.Buffer
	if code := Main([]string{"-n", "3", "prog-that-is-never-started"}, &out, &errs); code != ExitLaunch ||
		!strings.Contains(errs.String(), "use --oversubscribe to run more ranks than slots") {
		t.Errorf("ftrun -n 3 on 2 slots: exit %d, stderr %q", code, errs.String())
	}
}
