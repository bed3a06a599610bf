//go:build unix && !linux

package main

import "syscall"

// setDeathSignal does nothing where there is no parent-death signal.
func setDeathSignal(a *syscall.SysProcAttr) {}
