package main

import "syscall"

// setDeathSignal makes the kernel kill a server when the driver dies without
// stopping it (say, by SIGKILL), so that no server outlives the benchmark.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
