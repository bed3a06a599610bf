package host

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KillDescendant sends SIGKILL to pid after checking in /proc that root (a
// launcher the driver started: ftrun, mpirun) is among its ancestors, so
// that a driver never kills a process of someone else's; it returns the
// wall clock just before the signal, in nanoseconds since 1970. Without
// /proc (not Linux) it refuses.
func KillDescendant(root, pid int) (int64, error) {
	return SignalDescendant(root, pid, syscall.SIGKILL)
}

// SignalDescendant is KillDescendant with another signal (SIGSTOP: a rank
// that hangs).
func SignalDescendant(root, pid int, sig syscall.Signal) (int64, error) {
	p := pid
	for range 64 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			return 0, fmt.Errorf("process %d: %w", pid, err)
		}
		ppid, err := ParentPID(string(b))
		if err != nil {
			return 0, fmt.Errorf("process %d: %w", pid, err)
		}
		if ppid == root {
			now := time.Now().UnixNano()
			if err := syscall.Kill(pid, sig); err != nil {
				return 0, err
			}
			return now, nil
		}
		if ppid <= 1 {
			break
		}
		p = ppid
	}
	return 0, fmt.Errorf("process %d does not descend from the launcher (%d): not signalling it", pid, root)
}

// ParentPID returns the parent's pid from the text of /proc/PID/stat:
// "pid (comm) state ppid ...", where comm may hold spaces and parentheses.
func ParentPID(stat string) (int, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("cannot parse /proc stat " + strconv.Quote(stat))
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 2 {
		return 0, errors.New("cannot parse /proc stat " + strconv.Quote(stat))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, errors.New("cannot parse /proc stat " + strconv.Quote(stat))
	}
	return ppid, nil
}
