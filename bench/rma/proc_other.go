//go:build !unix

package main

import "os/exec"

// ownGroup is a no-op where process groups do not exist; cancelling kills
// only the launcher process.
func ownGroup(cmd *exec.Cmd) {}
