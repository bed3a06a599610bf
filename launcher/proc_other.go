//go:build unix && !linux

package launcher

import "syscall"

// sysProcAttr puts a rank in a process group of its own (see proc_linux.go).
// There is no Pdeathsig here: a rank may outlive a launcher that is killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
