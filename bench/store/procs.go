package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// A server process the driver started: each runs in a process group of its
// own, with its output in a log file, and is stopped by signalling that group
// (never by name). procs.stopAll stops every one still running.

type proc struct {
	name string
	log  string // path of the file holding its stdout and stderr
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// procTable is every process started and not yet stopped.
type procTable struct {
	mu   sync.Mutex
	live map[*proc]bool
}

var procs = &procTable{live: make(map[*proc]bool)}

// start starts argv with its output appended to logPath. The process lives
// until stop is called (or the driver dies: on Linux it gets SIGKILL then).
func (t *procTable) start(name, logPath string, argv, env []string, dir string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	t.mu.Lock()
	t.live[p] = true
	t.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks p's process group to terminate, waits up to grace, then kills it.
func (t *procTable) stop(p *proc, grace time.Duration) {
	if p == nil {
		return
	}
	t.mu.Lock()
	delete(t.live, p)
	t.mu.Unlock()
	if !p.exited() {
		signalGroup(p.cmd, false)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	// Kill what is left of the group (children of the server, if any) too.
	signalGroup(p.cmd, true)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// stopAll stops every process still running, all at once.
func (t *procTable) stopAll(grace time.Duration) {
	t.mu.Lock()
	var ps []*proc
	for p := range t.live {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { t.stop(p, grace) })
	}
	wg.Wait()
}

// count returns how many started processes have not been stopped.
func (t *procTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}

// waitLog waits until p's log contains want at least times times; it fails
// when p exits or ctx ends first.
func waitLog(ctx context.Context, p *proc, want string, times int) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		b, _ := os.ReadFile(p.log)
		if bytes.Count(b, []byte(want)) >= times {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited (%v) before printing %q:\n%s", p.name, p.err, want, tailString(b, 12))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %q not seen in its log: %w\n%s", p.name, want, ctx.Err(), tailString(b, 12))
		case <-tick.C:
		}
	}
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment
// ago (the kernel's choice for port 0).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitPort waits until something accepts TCP connections on addr.
func waitPort(ctx context.Context, addr string, p *proc) error {
	for {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		if p != nil && p.exited() {
			b, _ := os.ReadFile(p.log)
			return fmt.Errorf("%s exited (%v):\n%s", p.name, p.err, tailString(b, 12))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on %s: %w", addr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tailString returns the last n lines of b, indented.
func tailString(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// runCmd runs a short command to completion within timeout and returns its
// combined output.
func runCmd(ctx context.Context, timeout time.Duration, env []string, argv ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	setProcAttr(cmd)
	cmd.Cancel = func() error { signalGroup(cmd, true); return nil }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() == context.DeadlineExceeded {
		return out, fmt.Errorf("%s: timed out after %v", strings.Join(argv, " "), timeout)
	}
	if err != nil {
		return out, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, tailString(out, 15))
	}
	return out, nil
}
