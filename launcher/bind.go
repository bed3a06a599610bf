package launcher

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// CPU binding (ftrun --bind-to core, --report-bindings), as mpirun's: the
// i-th rank started at launch on a host runs on the i-th CPU that the
// launcher there (ftrun, or the host's agent) may run on, and on that CPU
// alone. Spares start unbound: they take the place of a failed rank, whose
// CPU they would have to learn.

// Binding policies (Config.BindTo).
const (
	BindNone = "none"
	BindCore = "core"
)

// bindCPUs returns the CPU of each of n ranks on this host: the first n of
// the CPUs this process may run on. More ranks than CPUs is an error, as
// with mpirun, which will not bind two processes to one core.
func bindCPUs(n int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("--bind-to core: the CPUs of this host: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < n; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < n {
		return nil, fmt.Errorf("--bind-to core: %d ranks on this host, which has %d CPUs for them: one CPU per rank (use --bind-to none)", n, set.Count())
	}
	return cpus, nil
}

// startOn starts cmd with its CPU affinity that of cpu alone, or as it is
// when cpu < 0. The child inherits the mask of the thread that forks it: a
// goroutine locked to its thread sets the mask, forks, and restores the
// mask. The thread must outlive the rank (Pdeathsig follows the thread that
// forked: sysProcAttr), so should the restore ever fail the goroutine keeps
// the thread for itself, parked, rather than let others run on one CPU.
func startOn(cmd *exec.Cmd, cpu int) error {
	if cpu < 0 {
		return cmd.Start()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var old, one unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("bind to cpu %d: %w", cpu, err)
			return
		}
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("bind to cpu %d: %w", cpu, err)
			return
		}
		done <- cmd.Start()
		if unix.SchedSetaffinity(0, &old) != nil {
			select {} // this thread keeps the mask, and runs nothing else
		}
		runtime.UnlockOSThread()
	}()
	return <-done
}

// bindingText says where a rank runs, for --report-bindings.
func bindingText(cpu int) string {
	if cpu < 0 {
		return "not bound"
	}
	return fmt.Sprintf("bound to cpu %d", cpu)
}
