package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	ftkvOnce sync.Once
	ftkvErr  error
)

// ftkvBin returns the path of cmd/ftkv, built beside the other binaries (or
// found in FTRMA_E2E_BINDIR).
func ftkvBin(t *testing.T) string {
	t.Helper()
	dir := bins(t)
	path := filepath.Join(dir, "ftkv")
	if os.Getenv("FTRMA_E2E_BINDIR") != "" {
		if _, err := os.Stat(path); err != nil {
			t.Skipf("no ftkv in FTRMA_E2E_BINDIR: %v", err)
		}
		return path
	}
	ftkvOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", path, "github.com/ftrma/ftrma/cmd/ftkv").CombinedOutput()
		if err != nil {
			ftkvErr = fmt.Errorf("go build ftkv: %v\n%s", err, out)
		}
	})
	if ftkvErr != nil {
		t.Fatal(ftkvErr)
	}
	return path
}

// ftkvClient runs an ftkv client command with stdin and returns its stdout,
// stderr and exit code.
func ftkvClient(t *testing.T, stdin []byte, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(ftkvBin(t), append(args, "--timeout", "20s")...)
	cmd.Stdin = bytes.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("ftkv %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// A store served by "ftrun -n 4 ftkv serve" through the CLI: put, get and del
// through any rank's socket; the sockets are 0600 and refused to a second
// server; bad requests get error replies; a put acknowledged before rank 2
// is SIGKILLed is still there after; stop ends every survivor with exit 0
// and every socket is removed, the killed rank's too.
func TestFtkvServe(t *testing.T) { eachTransport(t, testFtkvServe) }

func testFtkvServe(t *testing.T) {
	if multiHost() {
		t.Skip("the sockets of ranks on other hosts are not reachable here")
	}
	kv := ftkvBin(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "s")
	path := func(r int) string {
		if r == 0 {
			return sock
		}
		return fmt.Sprintf("%s.%d", sock, r)
	}
	start := time.Now()
	j := startJob(t, "-n", "4", "--tag-output", kv, "serve", "--socket", sock)
	pids := map[int]int{}
	ready := false
	lineRE := regexp.MustCompile(`^\[(\d)\] (?:rank \d \(pid (\d+)\) serving at (\S+)|ftkv serve: ready, 4 ranks, (\d) copies;)`)
	for len(pids) < 4 || !ready {
		m := j.waitLine(t, lineRE)
		if m[4] != "" {
			ready = true
			if m[4] != "3" {
				t.Errorf("serving with %s copies, want 3", m[4])
			}
			continue
		}
		r, _ := strconv.Atoi(m[1])
		pids[r] = pidOf(t, m[2])
		if m[3] != path(r) {
			t.Errorf("rank %d serves at %s, want %s", r, m[3], path(r))
		}
	}
	t.Logf("ready after %v", time.Since(start).Round(time.Millisecond))
	for r := range 4 {
		fi, err := os.Lstat(path(r))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want a socket with 0600", path(r), fi.Mode())
		}
	}

	// A second server on a live socket is refused and leaves it alone.
	out, code := ftrun(t, time.Minute, "-n", "1", kv, "serve", "--socket", sock)
	if code == 0 || !strings.Contains(out, "in use by a running server") {
		t.Errorf("a second server on %s: exit %d:\n%s", sock, code, out)
	}

	mustOK := func(stdin []byte, args ...string) string {
		t.Helper()
		o, e, code := ftkvClient(t, stdin, args...)
		if code != 0 {
			t.Fatalf("ftkv %v: exit %d: %s\njob output:\n%s", args, code, e, j.output())
		}
		return o
	}
	mustOK(nil, "put", "--socket", sock, "k1", "v1")
	if got := mustOK(nil, "get", "--socket", path(3), "k1"); got != "v1" {
		t.Errorf("get k1 through rank 3: %q, want v1", got)
	}
	// A binary value through stdin, through rank 2.
	bin := []byte("line 1\nline 2\x00\xff\n")
	mustOK(bin, "put", "--socket", path(2), "bin", "-")

	// Bad requests get error replies and do not hurt the server.
	for _, raw := range [][]byte{
		{0, 0, 0, 1, 9},                      // unknown request type
		{0, 0, 0, 5, 1, 0, 0, 0, 9},          // a get whose key field is cut short
		{0, 0, 0, 5, 1, 0, 0, 0, 0},          // a get with an empty key
		{0, 0, 0, 3, 2, 0, 0},                // a put cut inside a length
		{0x7f, 0xff, 0xff, 0xff, 1, 2, 3, 4}, // a frame far over the limit
	} {
		if msg := rawRequest(t, sock, raw); msg == "" {
			t.Errorf("request %x: no error reply", raw)
		} else {
			t.Logf("request %x: %q", raw, msg)
		}
	}

	// SIGKILL rank 2 (a rank of this test's own job), after the puts above
	// were acknowledged.
	syscall.Kill(pids[2], syscall.SIGKILL)
	j.waitLine(t, regexp.MustCompile(`^ftrun: rank 2 failed at `))
	if got := mustOK(nil, "get", "--socket", sock, "k1"); got != "v1" {
		t.Errorf("after the kill, get k1: %q, want v1", got)
	}
	if got := mustOK(nil, "get", "--socket", path(1), "bin"); got != string(bin) {
		t.Errorf("after the kill, get bin: %q, want %q", got, bin)
	}
	mustOK(nil, "put", "--socket", path(3), "k2", "v2")
	if got := mustOK(nil, "get", "--socket", sock, "k2"); got != "v2" {
		t.Errorf("get k2: %q, want v2", got)
	}
	mustOK(nil, "del", "--socket", sock, "k1")
	if o, e, code := ftkvClient(t, nil, "get", "--socket", path(1), "k1"); code != 1 || o != "" || !strings.Contains(e, "not found") {
		t.Errorf("get of a deleted key: exit %d, stdout %q, stderr %q; want 1, nothing, not found", code, o, e)
	}
	if _, e, code := ftkvClient(t, nil, "get", "--socket", path(2), "k2"); code != 1 {
		t.Errorf("get through the killed rank's socket: exit %d (%s), want 1", code, e)
	}

	mustOK(nil, "stop", "--socket", path(1))
	if code := j.wait(t); code != 0 {
		t.Fatalf("ftrun exit %d after stop:\n%s", code, j.output())
	}
	out = j.output()
	if !regexp.MustCompile(`(?m)^ftrun: 1 rank\(s\) failed: 2 \(at `).MatchString(out) {
		t.Errorf("ftrun did not report rank 2 as the one failed rank:\n%s", out)
	}
	left, _ := os.ReadDir(dir)
	for _, e := range left {
		t.Errorf("left behind: %s", e.Name())
	}
	t.Logf("whole run %v", time.Since(start).Round(time.Millisecond))
}

// rawRequest sends raw bytes to the server at path and returns the message
// of its error reply ("" if it answered otherwise or not at all).
func rawRequest(t *testing.T, path string, raw []byte) string {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write(raw)
	conn.(*net.UnixConn).CloseWrite() // a cut frame ends here
	b, _ := io.ReadAll(conn)
	// One reply: length, status 2 (error), one field: the message.
	if len(b) < 9 || b[4] != 2 || int(binary.BigEndian.Uint32(b)) != len(b)-4 || int(binary.BigEndian.Uint32(b[5:])) != len(b)-9 {
		return ""
	}
	return string(b[9:])
}
