//go:build linux

package launcher

import "syscall"

// sysProcAttr starts a rank (or the ssh or srun that starts agents) in a
// session of its own, and so in a process group of its own, and makes the
// kernel kill it when ftrun dies (Pdeathsig). Pdeathsig follows the OS thread
// that started the process, so Start must not run on a goroutine locked to a
// thread that exits.
//
// A process group of its own: a terminal's SIGINT reaches ftrun alone (which
// forwards it), and a signal to the group reaches the rank's own children
// too. A session of its own: where the kernel shares the CPU among sessions
// first (sched_autogroup, on by default in most distributions), the ranks of
// a host would otherwise share one share with their agent, the session ssh
// or srun started. Four busy ranks and their agent on an oversubscribed host
// then went without the CPU for up to 0.8 s at a time: the agent's lease
// grants came that late and a rank's own lease ran out (exit status 76), 2 in
// 12 runs of the multi-host suite's cut test beside a CPU hog; with a session
// per rank, none in 12, and no suspicion either (24 before).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}
