package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/store"
)

// serveOptions are the flags of ftkv serve.
type serveOptions struct {
	socket     string
	copies     copiesFlag
	maxValue   int
	reqTimeout time.Duration
	listPage   int // keys in an ls reply at most; 0 means listPageKeys (tests set it)

	snapshotDir   string        // where snapshots go ("": none)
	snapshotEvery time.Duration // a snapshot at least this often (0: only on request and at stop)
	snapshotKeep  int           // complete snapshots kept (0: all)
	restore       string        // start from the newest complete snapshot under this directory
}

const serveSynopsis = `usage: ftrun -n N ftkv serve --socket PATH [--copies K] [flags]

Every rank opens the store and serves the client commands (put, get, del,
ls, len, cas, snapshot, stop) on its own Unix domain socket: rank 0 on PATH,
rank r > 0 on PATH.r. The sockets are mode 0600 and removed when their rank
exits; a rank refuses a path that is a live socket. Rank 0 prints a line
when the job is ready. A rank's death does not stop the others; "ftkv stop
--socket PATH" (or PATH.r) stops them all, and each exits 0.

Snapshots: with --snapshot-dir DIR (a directory every rank reaches), "ftkv
snapshot" writes a consistent snapshot of the store under DIR, so does
every --snapshot-every period, and stop writes a last one once every rank
has answered its last request (and before rank 0's socket goes: "ftkv stop"
returns after it). --restore DIR starts the job from the newest complete
snapshot under DIR, written by a job of any size, and snapshots there too
unless --snapshot-dir names another directory. The newest --snapshot-keep
complete snapshots stay; older ones are removed.`

func serveFlags(o *serveOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&o.socket, "socket", "", "the Unix socket `PATH` of rank 0 (rank r: PATH.r); required")
	o.copies.define(fs)
	fs.IntVar(&o.maxValue, "max-value", 64<<20, "largest value in bytes")
	fs.DurationVar(&o.reqTimeout, "request-timeout", 10*time.Second, "deadline of each request (reading it, running it, answering it)")
	fs.StringVar(&o.snapshotDir, "snapshot-dir", "", "write snapshots under `DIR` (on request, periodically, at stop)")
	fs.DurationVar(&o.snapshotEvery, "snapshot-every", 0, "take a snapshot this often (0: on request and at stop only)")
	fs.StringVar(&o.restore, "restore", "", "start from the newest complete snapshot under `DIR`")
	fs.IntVar(&o.snapshotKeep, "snapshot-keep", 5, "keep the newest `K` complete snapshots, remove older ones (0: keep all)")
	return fs
}

func (o *serveOptions) validate(args []string) error {
	switch {
	case len(args) > 0:
		return fmt.Errorf("unexpected argument %q", args[0])
	case o.socket == "":
		return errors.New("--socket PATH is required")
	case o.copies.n < 1:
		return fmt.Errorf("--copies must be at least 1 (got %d)", o.copies.n)
	case o.maxValue < 1 || o.maxValue > maxValueLimit:
		return fmt.Errorf("--max-value must be 1 to %d bytes (got %d)", maxValueLimit, o.maxValue)
	case o.reqTimeout <= 0:
		return fmt.Errorf("--request-timeout must be positive (got %v)", o.reqTimeout)
	case o.snapshotKeep < 0:
		return fmt.Errorf("--snapshot-keep must not be negative (got %d)", o.snapshotKeep)
	case o.snapshotEvery < 0:
		return fmt.Errorf("--snapshot-every must not be negative (got %v)", o.snapshotEvery)
	case o.snapshotEvery > 0 && o.snapshotDir == "" && o.restore == "":
		return errors.New("--snapshot-every needs --snapshot-dir DIR (or --restore DIR)")
	}
	if o.snapshotDir == "" {
		o.snapshotDir = o.restore
	}
	return nil
}

// maxValueLimit bounds --max-value: a request is read whole into memory.
const maxValueLimit = 1 << 30

// maxKey is the store's default key limit (store.Config.MaxKeySize).
const maxKey = 1 << 10

// Bounds of an ls reply: one page of at most listPageKeys keys and
// listPageBytes bytes of keys (with their lengths), far below the client's
// frame limit; the client asks for the next page.
const (
	listPageKeys  = 1000
	listPageBytes = 256 << 10
)

// stopNotice is the notice (comm.Notify) that stops every serving rank.
const stopNotice = "ftkv/stop"

// Bounds of a serving rank.
const (
	maxConns   = 64                    // connections served at once; more wait in the backlog
	stopPoll   = 20 * time.Millisecond // how often a rank looks for the stop notice
	endTimeout = 30 * time.Second      // the final agreement and the store's close
)

func runServe(args []string, stdout, stderr io.Writer) int {
	var o serveOptions
	rest, code, done := parseFlags(serveFlags(&o), args, serveSynopsis, stdout, stderr)
	if done {
		return code
	}
	if err := o.validate(rest); err != nil {
		return usageError(stderr, "serve", err)
	}
	// SIGINT and SIGTERM (ftrun forwards them to every rank) stop this rank
	// as a stop request would.
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := serve(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "ftkv serve:", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// socketPath is rank r's socket.
func socketPath(base string, r int) string {
	if r == 0 {
		return base
	}
	return base + "." + strconv.Itoa(r)
}

// serve runs one rank of a serving job until a stop request reaches any rank
// or ctx ends (a signal).
func serve(ctx context.Context, o serveOptions, stdout, stderr io.Writer) error {
	c, err := startup.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return serveOn(ctx, c, o, stdout, stderr)
}

// serveOn is serve on communicator c: every rank of c calls it; failed
// snapshots are reported on stderr.
func serveOn(ctx context.Context, c *comm.Comm, o serveOptions, stdout, stderr io.Writer) error {
	me := int(c.Rank())
	copies, err := o.copies.resolve(c.Size())
	if err != nil {
		return err
	}
	path := socketPath(o.socket, me)
	ln, lerr := listenUnix(path)
	if lerr == nil {
		defer ln.close()
	}
	// Every rank must listen, or none serves.
	listening := uint64(1)
	if lerr != nil {
		listening = 0
	}
	if all, err := c.Agree(ctx, listening); lerr != nil {
		return lerr
	} else if err != nil {
		return fmt.Errorf("agreeing on the start: %w", err)
	} else if all == 0 {
		return errors.New("another rank could not listen on its socket")
	}
	s, err := openStore(ctx, c, o, copies, stdout)
	if err != nil {
		return err
	}
	snap := newSnapshotter(c, s, o.snapshotDir, o.snapshotEvery, o.snapshotKeep, stderr)
	sv := &server{c: c, s: s, opt: o, snap: snap, conns: map[net.Conn]bool{}}
	fmt.Fprintf(stdout, "rank %d (pid %d) serving at %s\n", me, os.Getpid(), path)
	if me == 0 {
		fmt.Fprintf(stdout, "ftkv serve: ready, %d ranks, %d copies; rank 0 at %s, rank r at %s.r; stop with: ftkv stop --socket %s\n",
			c.Size(), s.Copies(), o.socket, o.socket, o.socket)
	}
	serving := make(chan struct{})
	go func() { sv.acceptLoop(ln.l); close(serving) }()
	rounds := make(chan struct{})
	go func() { snap.run(func() bool { return c.Noticed(stopNotice) }); close(rounds) }()

	// Wait for the stop notice (from any rank) or a signal.
	tick := time.NewTicker(stopPoll)
	for !c.Noticed(stopNotice) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	tick.Stop()
	if ctx.Err() != nil {
		c.Notify(stopNotice) // a signal: the others stop too (ftrun signals them all anyway)
	}
	// Stop serving: no new connections, requests under way finish (each
	// within its deadline), idle connections end. Then the last snapshot
	// round, and the socket goes: a client's stop, which waits for rank 0's
	// socket to go, returns after the last snapshot.
	ln.stopAccepting()
	sv.drain()
	<-serving
	snap.stopped.Store(true)
	<-rounds
	ln.close()

	// The survivors agree that they are done, so that no rank leaves the
	// store while another still serves a request that needs it. Agree
	// completes despite failures; a rank that dies now is simply not waited for.
	ectx, ecancel := context.WithTimeout(context.Background(), endTimeout)
	defer ecancel()
	c.AckFailed(c.Size())
	_, aerr := c.Agree(ectx, 1)
	if failed := c.Failed(); len(failed) > 0 && lowestLive(c.Size(), failed) == me {
		// A killed rank could not remove its socket: the lowest survivor
		// removes those left on this host, if nobody listens on them.
		for _, f := range failed {
			removeStale(socketPath(o.socket, int(f)))
		}
	}
	cerr := s.Close(ectx)
	// The agreement's only expected error reports ranks that failed during
	// it; running out of time is a real one.
	if aerr != nil && ectx.Err() != nil {
		return fmt.Errorf("final agreement: %w", aerr)
	}
	if cerr != nil && len(c.Failed()) == 0 {
		return fmt.Errorf("close store: %w", cerr)
	}
	return nil
}

// openStore opens the store over c, or restores it from the newest
// snapshot under o.restore; rank 0 says which.
func openStore(ctx context.Context, c *comm.Comm, o serveOptions, copies int, stdout io.Writer) (*store.Store, error) {
	cfg := store.Config{Copies: copies, MaxValueSize: o.maxValue}
	if o.restore == "" {
		s, err := store.Open(ctx, c, cfg)
		if err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		return s, nil
	}
	s, info, err := store.Restore(ctx, c, o.restore, cfg)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if c.Rank() == 0 {
		fmt.Fprintf(stdout, "ftkv serve: restored from %s (cut %d)\n", info.Dir, info.Cut)
		for _, e := range info.Skipped {
			fmt.Fprintf(stdout, "ftkv serve: skipped %v\n", e)
		}
	}
	return s, nil
}

// lowestLive returns the lowest of n ranks not in failed (-1 if none).
func lowestLive[R ~int32 | ~int](n int, failed []R) int {
	dead := map[int]bool{}
	for _, f := range failed {
		dead[int(f)] = true
	}
	for r := range n {
		if !dead[r] {
			return r
		}
	}
	return -1
}

// server serves one rank's socket.
type server struct {
	c    *comm.Comm
	s    *store.Store
	opt  serveOptions
	snap *snapshotter

	mu       sync.Mutex // guards the fields below
	conns    map[net.Conn]bool
	draining bool           // set once: no connection is added after
	wg       sync.WaitGroup // the connections' goroutines; Add under mu
}

// acceptLoop accepts connections until l is closed, at most maxConns at once;
// it backs off on other accept errors (such as too many open files).
func (sv *server) acceptLoop(l *net.UnixListener) {
	slots := make(chan struct{}, maxConns)
	backoff := time.Duration(0)
	for {
		slots <- struct{}{}
		conn, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			<-slots
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if !sv.track(conn) {
			conn.Close()
			<-slots
			continue // until l is closed
		}
		go func() {
			defer func() { sv.untrack(conn); conn.Close(); <-slots; sv.wg.Done() }()
			sv.handle(conn)
		}()
	}
}

// track adds conn to the connections served, unless the server drains.
func (sv *server) track(conn net.Conn) bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.draining {
		return false
	}
	sv.conns[conn] = true
	sv.wg.Add(1) // under mu: drain's Wait comes after every Add
	return true
}

func (sv *server) untrack(conn net.Conn) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	delete(sv.conns, conn)
}

// drain ends every connection once its request under way (if any) is
// answered, and waits for them.
func (sv *server) drain() {
	sv.mu.Lock()
	sv.draining = true
	for conn := range sv.conns {
		conn.SetReadDeadline(time.Now()) // a blocked read of the next request ends
	}
	sv.mu.Unlock()
	sv.wg.Wait()
}

// maxFrame is the largest request this server reads.
func (sv *server) maxFrame() int { return maxRequest(sv.opt.maxValue) }

// handle serves the requests of one connection, one after the other.
func (sv *server) handle(conn net.Conn) {
	for {
		// The whole request must arrive within its deadline; so must the
		// next one, or the connection ends. (Set under mu, so that drain's
		// deadline is never overwritten.)
		sv.mu.Lock()
		draining := sv.draining
		if !draining {
			conn.SetReadDeadline(time.Now().Add(sv.opt.reqTimeout))
		}
		sv.mu.Unlock()
		if draining {
			return
		}
		req, err := readFrame(conn, sv.maxFrame(), maxRequestFields)
		var malformed *malformedError
		switch {
		case errors.As(err, &malformed):
			if !sv.reply(conn, errorReply(err)) {
				return
			}
			continue // the stream is in step
		case errors.Is(err, errFrameTooLarge):
			sv.reply(conn, errorReply(err))
			return // the rest of the frame is not read: the stream is lost
		case err != nil:
			return // the client went away, cut a frame short or was too slow
		}
		if !sv.reply(conn, sv.do(req)) {
			return
		}
	}
}

func (sv *server) reply(conn net.Conn, m message) bool {
	conn.SetWriteDeadline(time.Now().Add(sv.opt.reqTimeout))
	_, err := conn.Write(appendFrame(nil, m))
	return err == nil
}

func errorReply(err error) message {
	return message{code: statusError, fields: [][]byte{[]byte(err.Error())}}
}

// do runs one request against the store, within the request deadline.
func (sv *server) do(req message) message {
	if err := checkRequest(req); err != nil {
		return errorReply(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sv.opt.reqTimeout)
	defer cancel()
	switch req.code {
	case reqGet:
		v, err := sv.s.Get(ctx, req.fields[0])
		if errors.Is(err, store.ErrNotFound) {
			return message{code: statusNotFound}
		}
		if err != nil {
			return errorReply(err)
		}
		return message{code: statusOK, fields: [][]byte{v}}
	case reqPut:
		if err := sv.s.Put(ctx, req.fields[0], req.fields[1]); err != nil {
			return errorReply(err)
		}
	case reqDel:
		if err := sv.s.Delete(ctx, req.fields[0]); err != nil {
			return errorReply(err)
		}
	case reqList:
		return sv.list(ctx, req.fields[0], req.fields[1], binary.BigEndian.Uint32(req.fields[2]))
	case reqLen:
		n, err := sv.s.Len(ctx)
		if err != nil {
			return errorReply(err)
		}
		return message{code: statusOK, fields: [][]byte{u64(uint64(n))}}
	case reqGetVersion:
		v, ver, err := sv.s.GetVersion(ctx, req.fields[0])
		if errors.Is(err, store.ErrNotFound) {
			return message{code: statusNotFound}
		}
		if err != nil {
			return errorReply(err)
		}
		return message{code: statusOK, fields: [][]byte{u64(ver), v}}
	case reqCAS:
		// The store tells "no value" (nil) from the empty value (non-nil).
		flags, oldV, newV := req.fields[1][0], req.fields[2], req.fields[3]
		if flags&casOldAbsent != 0 {
			oldV = nil
		} else if oldV == nil {
			oldV = []byte{}
		}
		if flags&casDelete != 0 {
			newV = nil
		} else if newV == nil {
			newV = []byte{}
		}
		return condReply(sv.s.CompareAndSwap(ctx, req.fields[0], oldV, newV))
	case reqPutIfVersion:
		return condReply(sv.s.PutIfVersion(ctx, req.fields[0], req.fields[2], binary.BigEndian.Uint64(req.fields[1])))
	case reqDelIfVersion:
		return condReply(sv.s.DeleteIfVersion(ctx, req.fields[0], binary.BigEndian.Uint64(req.fields[1])))
	case reqStop:
		sv.c.Notify(stopNotice) // noticed here at once, by the others soon
	case reqSnapshot:
		info, err := sv.snap.request(ctx)
		if err != nil {
			return errorReply(err)
		}
		return message{code: statusOK, fields: [][]byte{[]byte(info.Dir), u64(info.Cut), u64(uint64(info.Keys))}}
	}
	return message{code: statusOK}
}

// condReply is the reply to a conditional write that returned done, err.
func condReply(done bool, err error) message {
	switch {
	case err != nil:
		return errorReply(err)
	case !done:
		return message{code: statusFailed}
	}
	return message{code: statusOK}
}

// list answers a reqList with one page of keys: at most limit (0: the page
// size, which also bounds a larger limit), cut short of listPageBytes.
func (sv *server) list(ctx context.Context, prefix, after []byte, limit uint32) message {
	n := listPageKeys
	if sv.opt.listPage > 0 {
		n = sv.opt.listPage
	}
	if limit > 0 && uint64(limit) < uint64(n) {
		n = int(limit)
	}
	if len(after) == 0 {
		after = nil // from the first key
	}
	keys, more, err := sv.s.Scan(ctx, prefix, after, n)
	if err != nil {
		return errorReply(err)
	}
	return listReply(cutPage(keys, more, listPageBytes))
}

// cutPage cuts keys (more: keys follow them) to the first ones whose fields
// fit in max bytes, and at least one.
func cutPage(keys [][]byte, more bool, max int) ([][]byte, bool) {
	size := 0
	for i, k := range keys {
		if size += 4 + len(k); size > max && i > 0 {
			return keys[:i], true
		}
	}
	return keys, more
}

// unixListener is a rank's listening socket, which it removes on close.
type unixListener struct {
	l    *net.UnixListener
	path string
	fi   os.FileInfo // the socket file, so that close removes only it
	once sync.Once
}

// listenUnix listens on a Unix socket at path, mode 0600. It refuses a path
// that exists, unless it is a stale socket (nobody accepts on it), which it
// replaces. The socket is made in a private directory beside path, given its
// mode there and then linked to path, so that nobody can connect while its
// mode is still the umask's, and an existing file is never overwritten.
func listenUnix(path string) (*unixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		switch stale, err := staleSocket(path); {
		case err != nil:
			return nil, fmt.Errorf("%s exists and cannot be checked: %w", path, err)
		case !stale:
			return nil, fmt.Errorf("%s is in use by a running server", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".ftkv-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	if err := os.Link(tmp, path); err != nil {
		l.Close()
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%s appeared while this server started", path)
		}
		return nil, err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		l.Close()
		return nil, err
	}
	return &unixListener{l: l, path: path, fi: fi}, nil
}

// stopAccepting stops listening; the socket stays until close.
func (u *unixListener) stopAccepting() { u.l.Close() }

// close stops listening and removes the socket, if path is still it.
func (u *unixListener) close() {
	u.once.Do(func() {
		u.l.Close()
		if fi, err := os.Lstat(u.path); err == nil && os.SameFile(fi, u.fi) {
			os.Remove(u.path)
		}
	})
}

// staleSocket reports whether the socket at path is stale: connecting is
// refused, nobody listens. A connection that succeeds (or fails otherwise,
// e.g. for permission) means it is not known to be stale.
func staleSocket(path string) (bool, error) {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return false, nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true, nil
	}
	return false, err
}

// removeStale removes the socket at path if nobody listens on it.
func removeStale(path string) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSocket {
		if stale, _ := staleSocket(path); stale {
			os.Remove(path)
		}
	}
}
