//go:build linux

package launcher

import "syscall"

// sysProcAttr puts a rank in a process group of its own, so that a terminal's
// SIGINT reaches ftrun alone (which forwards it) and a signal to the group
// reaches the rank's own children too; and it makes the kernel kill the rank
// when ftrun dies (Pdeathsig). Pdeathsig follows the OS thread that started
// the rank, so Start must not run on a goroutine locked to a thread that exits.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
