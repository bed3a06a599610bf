package e2e

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// relay forwards TCP connections from its own address to target, recording
// what passes and, when tamper is set, flipping a byte in every piece the
// client sends after its first two (the TLS handshake's flights).
type relay struct {
	ln     net.Listener
	target string
	tamper bool

	mu  sync.Mutex
	log bytes.Buffer
}

func startRelay(t *testing.T, target string, tamper bool) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, tamper: tamper}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(c)
		}
	}()
	return r
}

func (r *relay) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", r.target)
	if err != nil {
		return
	}
	defer s.Close()
	pipe := func(dst, src net.Conn, fromClient bool) {
		buf := make([]byte, 64<<10)
		for n := 0; ; n++ {
			k, err := src.Read(buf)
			if k > 0 {
				p := buf[:k]
				r.mu.Lock()
				r.log.Write(p)
				r.mu.Unlock()
				if r.tamper && fromClient && n >= 2 {
					p[k/2] ^= 0x20
				}
				if _, err := dst.Write(p); err != nil {
					return
				}
			}
			if err != nil {
				dst.(*net.TCPConn).CloseWrite()
				return
			}
		}
	}
	done := make(chan struct{})
	go func() { pipe(s, c, true); close(done) }()
	pipe(c, s, false)
	<-done
}

func (r *relay) seen() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.log.Bytes())
}

// startAgent runs "ftrun agent --listen" with secret and returns its
// address and log.
func startAgent(t *testing.T, secret string) (addr string, logs *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(bins(t), "ftrun"), "agent", "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "FTRMA_AGENT_SECRET="+secret)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs = new(syncBuffer)
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			logs.add(s.Text() + "\n")
			if a, ok := strings.CutPrefix(s.Text(), "ftrun agent: listening on "); ok {
				lines <- a
			}
		}
	}()
	t.Cleanup(func() { cancel(); cmd.Wait() })
	select {
	case addr = <-lines:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not start")
	}
	return addr, logs
}

// The agent link is mutual TLS keyed by the agent secret. A relay without
// the secret sees nothing of the job (not the job secret, the program, its
// environment or its output) and, when it alters what it relays, makes the
// agent run nothing; a launcher without the secret is refused.
func TestAgentLinkAgainstRelay(t *testing.T) {
	dir := bins(t)
	secret, err := exec.Command(filepath.Join(dir, "ftrun"), "agent", "--gen-secret").Output()
	if err != nil {
		t.Fatal(err)
	}
	agent, agentLog := startAgent(t, strings.TrimSpace(string(secret)))
	marks := t.TempDir()
	prog := filepath.Join(marks, "prog.sh")
	// Each rank leaves a mark, then runs a short job.
	script := "#!/bin/sh\ntouch " + marks + "/ran-$FTRMA_RANK\nexec " + filepath.Join(dir, "testprog") + " idle 200ms\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(via, sec string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "ftrun"), "-n", "2", "--hosts", "local:1,"+via+":1", "--tag-output", prog)
		cmd.Env = append(os.Environ(), "FTRMA_AGENT_SECRET="+sec)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("ftrun did not end:\n%s", out)
		}
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return string(out), code
	}

	// A passive relay: the job runs, the relay learns nothing.
	passive := startRelay(t, agent, false)
	out, code := run(passive.ln.Addr().String(), strings.TrimSpace(string(secret)))
	if code != 0 || strings.Count(out, "failed 0") != 2 {
		t.Fatalf("job through a passive relay: exit %d:\n%s", code, out)
	}
	seen := passive.seen()
	if len(seen) == 0 {
		t.Fatal("nothing went through the relay")
	}
	for _, clear := range []string{"FTRMA_", "prog.sh", "testprog", "failed 0", strings.TrimSpace(string(secret))} {
		if bytes.Contains(seen, []byte(clear)) {
			t.Errorf("the relay saw %q in clear", clear)
		}
	}
	os.Remove(filepath.Join(marks, "ran-1"))

	// A relay that alters the launcher's frames: the agent starts nothing.
	active := startRelay(t, agent, true)
	out, code = run(active.ln.Addr().String(), strings.TrimSpace(string(secret)))
	if code == 0 {
		t.Errorf("a job through a tampering relay succeeded:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(marks, "ran-1")); err == nil {
		t.Errorf("the agent ran the rank sent through a tampering relay:\n%s", out)
	}
	t.Logf("through a tampering relay: exit %d: %s", code, strings.TrimSpace(out))

	// A launcher without the secret is refused before it can say anything.
	other, _ := exec.Command(filepath.Join(dir, "ftrun"), "agent", "--gen-secret").Output()
	out, code = run(agent, strings.TrimSpace(string(other)))
	if code != 3 || !strings.Contains(out, "does not know the key") {
		t.Errorf("launcher with another secret: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(marks, "ran-1")); err == nil {
		t.Errorf("the agent ran a rank for a launcher without the secret")
	}
	// Raw bytes shaped like a launch frame: refused, nothing runs.
	c, err := net.Dial("tcp", agent)
	if err == nil {
		c.Write([]byte("\x00\x00\x00\x20\x0ajob\x00/bin/sh -c id\x00"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, c)
		c.Close()
	}
	// Refusals from one source are logged once a second, the next line
	// counting those left out.
	if !waitUntil(5*time.Second, func() bool { return strings.Count(agentLog.String(), "refused connection") >= 1 }) {
		t.Errorf("the agent does not report the refused connections:\n%s", agentLog)
	}
	// And it still serves the real launcher.
	out, code = run(agent, strings.TrimSpace(string(secret)))
	if code != 0 {
		t.Errorf("the agent no longer serves after the attacks: exit %d:\n%s", code, out)
	}
}

// syncBuffer is a log written by one goroutine (or process: it is an
// io.Writer) and read by another.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) add(l string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(l)
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitUntil(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return f()
}
