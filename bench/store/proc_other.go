//go:build !unix

package main

import "os/exec"

// setProcAttr does nothing where process groups do not exist.
func setProcAttr(cmd *exec.Cmd) {}

// signalGroup kills only the process itself where there are no groups.
func signalGroup(cmd *exec.Cmd, kill bool) {
	if cmd.Process != nil {
		cmd.Process.Kill()
	}
}
