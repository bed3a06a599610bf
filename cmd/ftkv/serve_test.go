package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/comm/commtest"
)

// A world of three in-process ranks serves the store: requests through any
// rank's socket see each other's writes, concurrent clients are served, the
// client commands ls (over server pages of 3 keys), len, cas, get --version
// and the conditional puts and deletes do what they say, a bad request gets
// an error reply and the connection goes on, and a stop sent to one rank
// ends every rank without error and removes every socket.
func TestServeInProcess(t *testing.T) {
	w := commtest.New(t, 3)
	dir := t.TempDir()
	o := serveOptions{socket: filepath.Join(dir, "kv"), maxValue: 1 << 20, reqTimeout: 10 * time.Second, listPage: 3}
	o.copies.n = 2
	o.copies.set = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outs := make([]bytes.Buffer, 3)
	done := make(chan []error, 1)
	go func() {
		done <- w.Run(ctx, func(ctx context.Context, c *comm.Comm) error {
			return serveOn(ctx, c, o, &outs[c.Rank()], &outs[c.Rank()])
		})
	}()
	call := func(r int, m message) message {
		t.Helper()
		rep, err := call(ctx, socketPath(o.socket, r), m)
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if err := checkReply(m.code, rep); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		return rep
	}
	for r := range 3 { // the sockets appear before the store opens; calls wait
		for {
			if _, err := os.Lstat(socketPath(o.socket, r)); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			k, v := fmt.Appendf(nil, "key/%d", i), fmt.Appendf(nil, "value %d", i)
			if rep := call(i%3, message{code: reqPut, fields: [][]byte{k, v}}); rep.code != statusOK {
				t.Errorf("put %s: %+v", k, rep)
			}
			if rep := call((i+1)%3, message{code: reqGet, fields: [][]byte{k}}); rep.code != statusOK || !bytes.Equal(rep.fields[0], v) {
				t.Errorf("get %s: %+v", k, rep)
			}
		})
	}
	wg.Wait()
	if rep := call(1, message{code: reqDel, fields: [][]byte{[]byte("key/0")}}); rep.code != statusOK {
		t.Errorf("del: %+v", rep)
	}
	if rep := call(2, message{code: reqGet, fields: [][]byte{[]byte("key/0")}}); rep.code != statusNotFound {
		t.Errorf("get of a deleted key: %+v", rep)
	}
	if rep := call(0, message{code: reqPut, fields: [][]byte{[]byte("big"), make([]byte, 2<<20)}}); rep.code != statusError {
		t.Errorf("a value over --max-value: %+v", rep)
	}

	// The client commands, in-process. The keys are key/1 to key/11.
	ftkv := func(wantCode int, args ...string) (stdout, stderr string) {
		t.Helper()
		code, stdout, stderr := runFtkv(append(args, "--socket", socketPath(o.socket, 1))...)
		if code != wantCode {
			t.Fatalf("ftkv %q: exit %d, want %d; stdout %q, stderr %q", args, code, wantCode, stdout, stderr)
		}
		return stdout, stderr
	}
	all := "key/1\nkey/10\nkey/11\nkey/2\nkey/3\nkey/4\nkey/5\nkey/6\nkey/7\nkey/8\nkey/9\n"
	if out, errOut := ftkv(0, "ls", "key/"); out != all || errOut != "" {
		t.Errorf("ls key/: %q, %q; want\n%s", out, errOut, all)
	}
	if out, _ := ftkv(0, "ls", "key/1"); out != "key/1\nkey/10\nkey/11\n" {
		t.Errorf("ls key/1: %q", out)
	}
	if out, _ := ftkv(0, "ls", "nope/"); out != "" {
		t.Errorf("ls nope/: %q", out)
	}
	out, errOut := ftkv(0, "ls", "--limit", "4", "key/")
	if out != "key/1\nkey/10\nkey/11\nkey/2\n" || errOut != "ftkv ls: more keys follow; continue with --after key/2\n" {
		t.Errorf("ls --limit 4: %q, %q", out, errOut)
	}
	if out, errOut := ftkv(0, "ls", "--after", "key/2", "--limit", "7"); out != all[len("key/1\nkey/10\nkey/11\nkey/2\n"):] || errOut != "" {
		t.Errorf("ls --after key/2 --limit 7 (exactly the rest): %q, %q", out, errOut)
	}
	if out, _ := ftkv(0, "len"); out != "11\n" {
		t.Errorf("len: %q", out)
	}
	if out, _ := ftkv(1, "cas", "key/1", "wrong", "new"); out != "not swapped\n" {
		t.Errorf("cas with a wrong old value: %q", out)
	}
	if out, _ := ftkv(0, "cas", "key/1", "value 1", "new"); out != "swapped\n" {
		t.Errorf("cas: %q", out)
	}
	ftkv(1, "cas", "key/1", "-", "x")
	ftkv(0, "cas", "fresh", "-", "")
	ftkv(0, "cas", "--delete", "fresh", "")
	ftkv(1, "put", "--if-absent", "key/1", "x")
	ftkv(0, "put", "--if-absent", "fresh", "f")
	out, _ = ftkv(0, "get", "--version", "key/1")
	verS, val, ok := strings.Cut(out, "\t")
	if !ok || val != "new" {
		t.Fatalf("get --version: %q", out)
	}
	ftkv(1, "put", "--if-version", verS+"0", "key/1", "x")
	ftkv(0, "put", "--if-version", verS, "key/1", "newer")
	ftkv(1, "del", "--if-version", verS, "key/1") // the put made a new version
	out, _ = ftkv(0, "get", "--version", "key/1")
	verS2, val, _ := strings.Cut(out, "\t")
	if val != "newer" || verS2 == verS {
		t.Errorf("get --version after put --if-version: %q (version before %s)", out, verS)
	}
	ftkv(0, "del", "--if-version", verS2, "key/1")
	ftkv(1, "get", "key/1")
	ftkv(0, "put", "--if-version", "0", "key/1", "back")
	if out, _ := ftkv(0, "len"); out != "12\n" { // key/1 back, fresh
		t.Errorf("len at the end: %q", out)
	}
	if _, errOut := ftkv(1, "snapshot"); !strings.Contains(errOut, "takes no snapshots") {
		t.Errorf("snapshot without a snapshot directory: %q", errOut)
	}

	// One connection: a malformed message, an unknown request, then a good one.
	conn, err := net.Dial("unix", o.socket)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	conn.Write([]byte{0, 0, 0, 3, 1, 0, 0})
	conn.Write(appendFrame(nil, message{code: 77}))
	conn.Write(appendFrame(nil, message{code: reqGet, fields: [][]byte{[]byte("key/1")}}))
	for i, want := range []byte{statusError, statusError, statusOK} {
		rep, err := readFrame(conn, 1<<20, 1<<20)
		if err != nil || rep.code != want {
			t.Fatalf("reply %d on one connection: %+v, %v; want status %d", i, rep, err, want)
		}
	}
	conn.Close()

	call(2, message{code: reqStop})
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("the ranks did not stop")
	}
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if !strings.Contains(outs[0].String(), "ready, 3 ranks, 2 copies") {
		t.Errorf("rank 0 printed %q", outs[0].String())
	}
}

func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")

	l, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v; want mode 0600", fi, err)
	}
	ul := l.l
	go func() { // accept, so that the socket is live
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if _, err := listenUnix(path); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second listener on a live socket: %v", err)
	}
	l.close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after close: %v", err)
	}

	// A stale socket, left by a killed server, is replaced.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	l, err = listenUnix(path)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	// close does not remove a file that replaced the socket.
	os.Remove(path)
	os.WriteFile(path, []byte("not mine"), 0o600)
	l.close()
	if b, err := os.ReadFile(path); err != nil || string(b) != "not mine" {
		t.Errorf("close removed or changed another file: %q, %v", b, err)
	}
	// A path that is not a socket is refused, and left alone.
	if _, err := listenUnix(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a regular file: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("left in the directory: %v", left)
	}
}

func TestCutPage(t *testing.T) {
	k := func(n int) []byte { return bytes.Repeat([]byte{'k'}, n) }
	for _, c := range []struct {
		keys     [][]byte
		more     bool
		max      int
		wantN    int
		wantMore bool
	}{
		{nil, false, 10, 0, false},
		{[][]byte{k(2), k(3)}, false, 11, 1, true}, // 6 + 7 bytes > 11: cut
		{[][]byte{k(2), k(3)}, false, 13, 2, false},
		{[][]byte{k(2), k(3)}, true, 13, 2, true},
		{[][]byte{k(2), k(3)}, false, 12, 1, true},
		{[][]byte{k(20), k(3)}, false, 5, 1, true}, // at least one key
	} {
		got, more := cutPage(c.keys, c.more, c.max)
		if len(got) != c.wantN || more != c.wantMore {
			t.Errorf("%d keys (more %v) in %d bytes: %d keys, more %v; want %d, %v", len(c.keys), c.more, c.max, len(got), more, c.wantN, c.wantMore)
		}
	}
}

// The client sends nothing to a server that runs as another user: it reads
// the socket's peer credentials first.
func TestClientChecksServerUID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ctx := context.Background()
	c, err := dialAs(ctx, path, os.Getuid())
	if err != nil {
		t.Fatalf("a server of this user: %v", err)
	}
	c.close()
	if _, err := dialAs(ctx, path, os.Getuid()+1); err == nil || !strings.Contains(err.Error(), "sending it nothing") {
		t.Errorf("a server of another uid: %v, want refused", err)
	}
}
