// Package host holds what the benchmark drivers need to know about the machine
// they run on: where the ftrma module and the go command are, and how busy
// the CPUs are before measuring.
package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FindModule returns the go command and the root of the Go module that holds
// the working directory (the ftrma module, from which drivers build ftrun and
// their rank programs).
func FindModule(ctx context.Context) (goBin, root string, err error) {
	goBin, err = exec.LookPath("go")
	if err != nil {
		gr := os.Getenv("GOROOT")
		if gr == "" {
			return "", "", errors.New("the go command is not on PATH")
		}
		goBin = filepath.Join(gr, "bin", "go")
	}
	out, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil {
		return goBin, "", fmt.Errorf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return goBin, "", errors.New("run from inside the ftrma module (go env GOMOD is empty)")
	}
	return goBin, filepath.Dir(mod), nil
}

// CPUBusy returns the fraction of all CPUs' time that was not idle (idle or
// iowait) during the next d, from /proc/stat, and whether it could be measured.
func CPUBusy(d time.Duration) (float64, bool) {
	idle0, total0, ok := cpuTimes()
	if !ok {
		return 0, false
	}
	time.Sleep(d)
	idle1, total1, ok := cpuTimes()
	if !ok || total1 <= total0 {
		return 0, false
	}
	return 1 - float64(idle1-idle0)/float64(total1-total0), true
}

// cpuTimes reads the aggregate "cpu" line of /proc/stat: idle (idle + iowait)
// and total jiffies.
func cpuTimes() (idle, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	return parseCPULine(b)
}

func parseCPULine(b []byte) (idle, total uint64, ok bool) {
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, x := range f[1:] {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total, true
}

// IdleWake describes how this machine's idle CPUs wait, when that decides
// what a wake-up of a process on another CPU costs: in a KVM guest whose
// cpuidle driver is haltpoll, guest_halt_poll_ns is how long an idle CPU
// polls before it halts. At 0 every wake-up of a halted CPU exits to the
// hypervisor (tens of microseconds here), and a round trip between two
// processes that sleep on different CPUs pays two of them, while two
// processes the scheduler happens to keep on one CPU pay none. It returns
// "" when the machine has no such driver.
func IdleWake() string {
	driver, err := os.ReadFile("/sys/devices/system/cpu/cpuidle/current_driver")
	if err != nil || strings.TrimSpace(string(driver)) != "haltpoll" {
		return ""
	}
	ns, err := os.ReadFile("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
	if err != nil {
		return ""
	}
	return describeHaltPoll(strings.TrimSpace(string(ns)))
}

func describeHaltPoll(ns string) string {
	if ns == "0" {
		return "idle CPUs halt at once (cpuidle haltpoll, guest_halt_poll_ns 0): " +
			"each wake-up of a process on an idle CPU exits to the hypervisor, " +
			"so latencies depend on whether the scheduler keeps the two ends of an exchange on one CPU"
	}
	return fmt.Sprintf("idle CPUs poll for %s ns before halting (cpuidle haltpoll, guest_halt_poll_ns)", ns)
}
