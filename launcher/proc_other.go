//go:build unix && !linux

package launcher

import "syscall"

// sysProcAttr starts a process in a session of its own (see proc_linux.go).
// There is no Pdeathsig here: a rank may outlive a launcher that is killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true}
}
