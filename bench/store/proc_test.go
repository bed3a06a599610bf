//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcStopKillsGroup starts a shell that starts a child of its own and
// checks that stop ends both, and that stopAll leaves nothing behind.
func TestProcStopKillsGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	p, err := procs.start("sh", filepath.Join(dir, "sh.log"),
		[]string{"/bin/sh", "-c", "sleep 60 & echo $! > " + pidFile + "; echo ready; wait"}, nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitLog(ctx, p, "ready", 1); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if procs.count() != 1 {
		t.Errorf("%d live processes, want 1", procs.count())
	}
	procs.stopAll(2 * time.Second)
	if !p.exited() {
		t.Error("the shell survived stopAll")
	}
	if procs.count() != 0 {
		t.Errorf("%d live processes after stopAll", procs.count())
	}
	// The child is gone too (it may linger as a zombie of init for a moment).
	deadline := time.Now().Add(5 * time.Second)
	for alive(child) {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the shell's child %d survived", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWaitLogSeesExit(t *testing.T) {
	dir := t.TempDir()
	p, err := procs.start("false", filepath.Join(dir, "f.log"), []string{"/bin/sh", "-c", "echo bye; exit 3"}, nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer procs.stop(p, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = waitLog(ctx, p, "never printed", 1)
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "bye") {
		t.Errorf("waitLog = %v, want an exit error with the log's tail", err)
	}
}

func TestFreePorts(t *testing.T) {
	ports, err := freePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[int]bool)
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Errorf("ports %v", ports)
		}
		seen[p] = true
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
