package launcher

import (
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// A silent connection does not hold up "ftrun agent --once": with a
// handshake deadline of an hour, a job launched after an idle client
// connected runs at once and ends, the agent's Serve returns after it, and
// the idle connection is closed then (before, the agent handshook one
// connection at a time: the job waited the whole deadline, and the
// launcher's own 10 s gave up first).
func TestAgentOnceIdleConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	t.Setenv(helperEnv, "print")
	t.Setenv("GORACE", "atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	env := append(os.Environ(), helperEnv+"=print")
	logs := new(logBuffer)
	a, err := ListenAgent(AgentConfig{Listen: "127.0.0.1:0", Secret: testAgentKey(), Once: true, Env: env,
		HandshakeTimeout: time.Hour, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Close() })

	idle, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	var out, errs logBuffer
	j, err := Start(&Config{N: 2, Hosts: []HostSpec{{N: 1}, {Addr: a.Addr().String(), N: 1}}, AgentSecret: testAgentSecret,
		Timeout: 2 * helperLife, Prog: selfPath(t), Stdout: &out, Stderr: &errs})
	if err != nil {
		t.Fatalf("job behind an idle connection: %v\nagent log:\n%s", err, logs)
	}
	if res := j.Wait(); res.ExitCode() != ExitOK {
		t.Fatalf("job: %+v; stderr:\n%s", res, errs.String())
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(2 * helperLife):
		t.Fatalf("the --once agent did not return after its job; log:\n%s", logs)
	}
	// The idle client's connection was closed by the agent, not left to
	// its deadline.
	idle.SetReadDeadline(time.Now().Add(helperLife))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection after the job: %v, want EOF", err)
	}
}
