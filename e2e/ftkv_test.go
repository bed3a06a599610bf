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
	"slices"
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
	path := func(r int) string { return ftkvPath(sock, r) }
	start := time.Now()
	j, pids := startFtkv(t, kv, sock, 4)
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
		{0, 0, 0, 1, 0xee},                   // unknown request type
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

// ftkvPath is rank r's socket of a job serving at sock.
func ftkvPath(sock string, r int) string {
	if r == 0 {
		return sock
	}
	return fmt.Sprintf("%s.%d", sock, r)
}

// startFtkv starts "ftrun -n n ftkv serve --socket sock" with the serve
// flags extra and returns the job, once every rank serves, and the ranks'
// pids.
func startFtkv(t *testing.T, kv, sock string, n int, extra ...string) (*job, map[int]int) {
	t.Helper()
	args := []string{"-n", strconv.Itoa(n), "--tag-output"}
	j := startJob(t, slices.Concat(args, []string{kv, "serve", "--socket", sock}, extra)...)
	pids := map[int]int{}
	ready := false
	lineRE := regexp.MustCompile(`^\[(\d)\] (?:rank \d \(pid (\d+)\) serving at (\S+)|ftkv serve: ready, (\d+) ranks, (\d) copies;)`)
	for len(pids) < n || !ready {
		m := j.waitLine(t, lineRE)
		if m[4] != "" {
			ready = true
			if m[4] != strconv.Itoa(n) || m[5] != strconv.Itoa(min(3, n)) {
				t.Errorf("serving with %s ranks and %s copies, want %d and %d", m[4], m[5], n, min(3, n))
			}
			continue
		}
		r, _ := strconv.Atoi(m[1])
		pids[r] = pidOf(t, m[2])
		if m[3] != ftkvPath(sock, r) {
			t.Errorf("rank %d serves at %s, want %s", r, m[3], ftkvPath(sock, r))
		}
	}
	return j, pids
}

// The whole job lost and started again from its snapshot, with another
// number of ranks: "ftrun -n 3 ftkv serve --snapshot-dir D"; keys put,
// "ftkv snapshot", more keys put, then ftrun and every rank SIGKILLed.
// "ftrun -n 2 ftkv serve --restore D" serves exactly the keys of the
// snapshot (those put after it are gone with the job); a key put there,
// a rank SIGKILLed, then "ftkv stop": the last snapshot, over the
// survivor, holds it. "ftrun -n 4 ... --restore D" serves it.
func TestFtkvSnapshotRestart(t *testing.T) {
	if multiHost() {
		t.Skip("the sockets of ranks on other hosts are not reachable here")
	}
	kv := ftkvBin(t)
	dir := t.TempDir()
	sock, snaps := filepath.Join(dir, "s"), filepath.Join(dir, "snaps")
	mustOK := func(j *job, args ...string) string {
		t.Helper()
		o, e, code := ftkvClient(t, nil, args...)
		if code != 0 {
			t.Fatalf("ftkv %v: exit %d: %s\njob output:\n%s", args, code, e, j.output())
		}
		return o
	}
	j, pids := startFtkv(t, kv, sock, 3, "--snapshot-dir", snaps)
	for i := range 30 {
		mustOK(j, "put", "--socket", ftkvPath(sock, i%3), fmt.Sprintf("key/%d", i), fmt.Sprintf("v%d", i))
	}
	if out := mustOK(j, "snapshot", "--socket", ftkvPath(sock, 1)); !strings.Contains(out, ": cut ") || !strings.HasSuffix(out, ", 30 keys\n") {
		t.Fatalf("ftkv snapshot: %q, want a snapshot of 30 keys", out)
	}
	mustOK(j, "put", "--socket", sock, "key/0", "after the snapshot")
	mustOK(j, "put", "--socket", sock, "lost", "after the snapshot")
	j.cmd.Process.Kill() // the whole job: ftrun, then every rank
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	j.wait(t)

	j, pids = startFtkv(t, kv, sock, 2, "--restore", snaps)
	if !strings.Contains(j.output(), "ftkv serve: restored from "+snaps) {
		t.Errorf("the restarted job did not say what it restored:\n%s", j.output())
	}
	if got := mustOK(j, "get", "--socket", ftkvPath(sock, 1), "key/0"); got != "v0" {
		t.Errorf("key/0 after the restart: %q, want the snapshot's v0", got)
	}
	if _, _, code := ftkvClient(t, nil, "get", "--socket", sock, "lost"); code != 1 {
		t.Errorf("a key put after the snapshot: exit %d, want 1 (not found)", code)
	}
	if got := mustOK(j, "len", "--socket", sock); got != "30\n" {
		t.Errorf("len after the restart: %q, want 30", got)
	}
	mustOK(j, "put", "--socket", sock, "second", "job")
	syscall.Kill(pids[1], syscall.SIGKILL)
	j.waitLine(t, regexp.MustCompile(`^ftrun: rank 1 failed at `))
	mustOK(j, "stop", "--socket", sock)
	if code := j.wait(t); code != 0 {
		t.Fatalf("ftrun exit %d after stop:\n%s", code, j.output())
	}

	j, _ = startFtkv(t, kv, sock, 4, "--restore", snaps)
	for k, v := range map[string]string{"second": "job", "key/0": "v0", "key/29": "v29"} {
		if got := mustOK(j, "get", "--socket", ftkvPath(sock, 3), k); got != v {
			t.Errorf("%s in the third job: %q, want %q", k, got, v)
		}
	}
	if got := mustOK(j, "len", "--socket", sock); got != "31\n" {
		t.Errorf("len in the third job: %q, want 31", got)
	}
	mustOK(j, "stop", "--socket", sock)
	if code := j.wait(t); code != 0 {
		t.Fatalf("ftrun exit %d after stop:\n%s", code, j.output())
	}
}

// ls, len and the conditional writes through the CLI, against "ftrun -n 4
// ftkv serve": ls lists a prefix in byte order, pages with --limit and goes on
// from the --after its last line on stderr names (also from a key it printed
// quoted), and agrees with len; cas swaps when the old value matches and not
// otherwise (exit 1, "not swapped"); put --if-absent stores only a new key;
// put --if-version and del --if-version take effect only at the version get
// --version printed.
func TestFtkvListAndConditional(t *testing.T) { eachTransport(t, testFtkvListAndConditional) }

func testFtkvListAndConditional(t *testing.T) {
	if multiHost() {
		t.Skip("the sockets of ranks on other hosts are not reachable here")
	}
	kv := ftkvBin(t)
	sock := filepath.Join(t.TempDir(), "s")
	start := time.Now()
	j, _ := startFtkv(t, kv, sock, 4)
	// kv runs a client command through rank r's socket and checks its exit
	// status.
	kvAt := func(r, wantCode int, args ...string) (stdout, stderr string) {
		t.Helper()
		args = append([]string{args[0], "--socket", ftkvPath(sock, r)}, args[1:]...)
		o, e, code := ftkvClient(t, nil, args...)
		if code != wantCode {
			t.Fatalf("ftkv %q: exit %d, want %d; stdout %q, stderr %q\njob output:\n%s", args, code, wantCode, o, e, j.output())
		}
		return o, e
	}

	// 12 keys under ls/a/ (one with a newline, which ls quotes), 2 under
	// ls/b/, one elsewhere: put through every rank.
	var want []string // ls ls/a/, in byte order: "ls/a/\n..." < "ls/a/01"
	want = append(want, `"ls/a/\nnl"`)
	kvAt(1, 0, "put", "ls/a/\nnl", "x")
	for i := 1; i <= 11; i++ {
		k := fmt.Sprintf("ls/a/%02d", i)
		kvAt(i%4, 0, "put", k, "v"+k)
		want = append(want, k)
	}
	for _, k := range []string{"ls/b/1", "ls/b/2", "other"} {
		kvAt(2, 0, "put", k, "o1")
	}
	lines := strings.Fields // no key here has a space
	hintRE := regexp.MustCompile(`^ftkv ls: more keys follow; continue with --after (\S+)\n$`)

	if o, e := kvAt(3, 0, "ls", "ls/a/"); strings.Join(lines(o), ",") != strings.Join(want, ",") || e != "" {
		t.Errorf("ls ls/a/:\n%s(stderr %q)\nwant\n%s", o, e, strings.Join(want, "\n"))
	}
	// Pages of 5: 5, 5 and the last 2, each page going on from the hint.
	var got []string
	after := ""
	for page := 0; ; page++ {
		args := []string{"ls", "--limit", "5", "ls/a/"}
		if after != "" {
			args = append(args, "--after", after)
		}
		o, e := kvAt(page%4, 0, args...)
		l := lines(o)
		got = append(got, l...)
		m := hintRE.FindStringSubmatch(e)
		if page < 2 && (len(l) != 5 || m == nil || m[1] != l[4]) {
			t.Fatalf("ls page %d: %q, stderr %q; want 5 keys and a hint to go on after the last", page, l, e)
		}
		if page == 2 {
			if len(l) != 2 || e != "" {
				t.Errorf("last ls page: %q, stderr %q; want 2 keys and no hint", l, e)
			}
			break
		}
		after = m[1]
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("ls in pages: %q, want %q", got, want)
	}
	// Going on from the quoted line.
	if o, _ := kvAt(0, 0, "ls", "--after", want[0], "ls/a/"); strings.Join(lines(o), ",") != strings.Join(want[1:], ",") {
		t.Errorf("ls --after %s: %q", want[0], o)
	}
	if o, _ := kvAt(1, 0, "ls", "ls/b/"); o != "ls/b/1\nls/b/2\n" {
		t.Errorf("ls ls/b/: %q", o)
	}
	o, _ := kvAt(2, 0, "ls")
	if n := len(lines(o)); n != 15 {
		t.Errorf("ls: %d keys, want 15:\n%s", n, o)
	}
	if o, _ := kvAt(3, 0, "len"); o != "15\n" {
		t.Errorf("len: %q, want 15", o)
	}

	// cas: both outcomes, and put if absent through it.
	if o, _ := kvAt(0, 1, "cas", "other", "wrong", "o2"); o != "not swapped\n" {
		t.Errorf("cas with a wrong old value: %q", o)
	}
	if o, _ := kvAt(1, 0, "cas", "other", "o1", "o2"); o != "swapped\n" {
		t.Errorf("cas: %q", o)
	}
	if o, _ := kvAt(2, 0, "get", "other"); o != "o2" {
		t.Errorf("get after cas: %q, want o2", o)
	}
	kvAt(3, 1, "cas", "other", "-", "o3") // it has a value

	// put --if-absent: both outcomes.
	if _, e := kvAt(0, 1, "put", "--if-absent", "other", "x"); !strings.Contains(e, "not stored") {
		t.Errorf("put --if-absent over a value: stderr %q", e)
	}
	kvAt(1, 0, "put", "--if-absent", "fresh", "f1")
	if o, _ := kvAt(2, 0, "get", "fresh"); o != "f1" {
		t.Errorf("get fresh: %q, want f1", o)
	}

	// get --version, then put and del --if-version with the right version and a wrong one.
	o, _ = kvAt(3, 0, "get", "--version", "other")
	verS, val, ok := strings.Cut(o, "\t")
	ver, err := strconv.ParseUint(verS, 10, 64)
	if !ok || err != nil || ver == 0 || val != "o2" {
		t.Fatalf("get --version: %q, want VERSION<TAB>o2", o)
	}
	if _, e := kvAt(0, 1, "put", "--if-version", strconv.FormatUint(ver+1, 10), "other", "o3"); !strings.Contains(e, "not stored") {
		t.Errorf("put --if-version with a wrong version: stderr %q", e)
	}
	kvAt(1, 0, "put", "--if-version", verS, "other", "o3")
	o, _ = kvAt(2, 0, "get", "--version", "other")
	ver2S, val, _ := strings.Cut(o, "\t")
	if val != "o3" || ver2S == verS {
		t.Errorf("get --version after put --if-version %s: %q", verS, o)
	}
	if _, e := kvAt(3, 1, "del", "--if-version", verS, "other"); !strings.Contains(e, "not deleted") {
		t.Errorf("del --if-version with an old version: stderr %q", e)
	}
	kvAt(0, 0, "del", "--if-version", ver2S, "other")
	kvAt(1, 1, "get", "other")
	if o, _ := kvAt(2, 0, "len"); o != "15\n" { // other gone, fresh new
		t.Errorf("len at the end: %q, want 15", o)
	}

	kvAt(3, 0, "stop")
	if code := j.wait(t); code != 0 {
		t.Fatalf("ftrun exit %d after stop:\n%s", code, j.output())
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
