package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killChild sends SIGKILL to pid, after checking that it is a child of
// parent (ftrun, which the driver started), and returns the wall clock just
// before the signal, in nanoseconds since 1970.
func killChild(parent, pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	ppid, err := parentPID(string(b))
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	if ppid != parent {
		return 0, fmt.Errorf("process %d is a child of %d, not of ftrun (%d): not killing it", pid, ppid, parent)
	}
	now := time.Now().UnixNano()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	return now, nil
}

// parentPID returns the parent's pid from the text of /proc/PID/stat:
// "pid (comm) state ppid ...", where comm may hold spaces and parentheses.
func parentPID(stat string) (int, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("cannot parse /proc stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("cannot parse /proc stat %q", stat)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, fmt.Errorf("cannot parse /proc stat %q", stat)
	}
	return ppid, nil
}
