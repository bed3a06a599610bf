//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts cmd in a process group of its own, so that stopping it
// reaches the children it starts too, and nothing else.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// signalGroup sends SIGTERM (or SIGKILL when kill is set) to cmd's process
// group, which only cmd and its children are in.
func signalGroup(cmd *exec.Cmd, kill bool) {
	if cmd.Process == nil {
		return
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	syscall.Kill(-cmd.Process.Pid, sig)
}
