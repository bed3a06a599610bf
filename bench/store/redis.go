package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Redis: Debian's redis-server, one primary and copies-1 replicas on
// loopback ports, persistence off. A put is SET followed by WAIT copies-1
// (both sent in one write); WAIT returns once that many replicas have
// acknowledged the SET, or after redisWaitTimeout with fewer, which the
// workload counts as a failed put.

// redisWaitTimeout is WAIT's timeout argument.
const redisWaitTimeout = time.Second

type redisPeer struct {
	bin     string
	dir     string
	version string
	how     string // where redis-server came from

	primary  *proc
	port     int
	replicas []*proc
	copies   int

	mu    sync.Mutex
	conns []*respConn // one per writer, dialled on first use
	admin *respConn
}

// setupRedis installs redis-server when missing.
func setupRedis(ctx context.Context, in *installer, dir string) (*redisPeer, error) {
	bin, err := in.ensureCommand(ctx, "redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	out, err := runCmd(ctx, 30*time.Second, nil, bin, "--version")
	if err != nil {
		return nil, err
	}
	d := filepath.Join(dir, "redis")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	return &redisPeer{bin: bin, dir: d, version: parseRedisVersion(string(out)), how: origin(ctx, bin)}, nil
}

// parseRedisVersion picks v=X.Y.Z out of "Redis server v=7.0.15 sha=...".
func parseRedisVersion(s string) string {
	for _, f := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(s)
}

// redisArgs is the command line of one server: a primary when primaryPort
// is 0, else a replica of the primary at primaryPort.
func redisArgs(bin, dir string, port, primaryPort int) []string {
	args := []string{bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--protected-mode", "yes",
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--dbfilename", fmt.Sprintf("dump-%d.rdb", port),
		"--repl-diskless-sync", "yes",
		"--repl-diskless-sync-delay", "0",
		"--loglevel", "notice",
	}
	if primaryPort != 0 {
		args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(primaryPort))
	}
	return args
}

func (r *redisPeer) supports(copies int) string { return "" }

func (r *redisPeer) startServer(ctx context.Context, primaryPort int) (*proc, int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, 0, err
	}
	role := "primary"
	if primaryPort != 0 {
		role = "replica"
	}
	name := fmt.Sprintf("redis-%s-%d", role, ports[0])
	p, err := procs.start(name, filepath.Join(r.dir, name+".log"), redisArgs(r.bin, r.dir, ports[0], primaryPort), nil, r.dir)
	if err != nil {
		return nil, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := waitPort(wctx, fmt.Sprintf("127.0.0.1:%d", ports[0]), p); err != nil {
		procs.stop(p, time.Second)
		return nil, 0, err
	}
	return p, ports[0], nil
}

func (r *redisPeer) prepare(ctx context.Context, copies, writers int) (kv, error) {
	if r.primary == nil || r.primary.exited() {
		p, port, err := r.startServer(ctx, 0)
		if err != nil {
			return nil, err
		}
		r.primary, r.port = p, port
		a, err := dialRESP(ctx, r.addr())
		if err != nil {
			return nil, err
		}
		r.admin = a
	}
	for len(r.replicas) > copies-1 {
		last := r.replicas[len(r.replicas)-1]
		r.replicas = r.replicas[:len(r.replicas)-1]
		procs.stop(last, 2*time.Second)
	}
	for len(r.replicas) < copies-1 {
		p, _, err := r.startServer(ctx, r.port)
		if err != nil {
			return nil, err
		}
		r.replicas = append(r.replicas, p)
	}
	// Wait until the primary has exactly copies-1 replicas, all online.
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		rep, err := r.admin.do(wctx, "INFO", "replication")
		if err != nil {
			return nil, fmt.Errorf("redis INFO replication: %w", err)
		}
		st := parseReplicationInfo(string(rep.bulk))
		if st.online == copies-1 && st.total == copies-1 {
			break
		}
		select {
		case <-wctx.Done():
			return nil, fmt.Errorf("redis: %d of %d replicas online (%d connected) after 60s", st.online, copies-1, st.total)
		case <-time.After(50 * time.Millisecond):
		}
	}
	r.mu.Lock()
	r.closeConns()
	r.conns = make([]*respConn, writers)
	r.mu.Unlock()
	r.copies = copies
	return r, nil
}

func (r *redisPeer) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// conn returns writer w's connection, dialling it when needed.
func (r *redisPeer) conn(ctx context.Context, w int) (*respConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w < 0 || w >= len(r.conns) {
		return nil, fmt.Errorf("redis: no writer %d", w)
	}
	if r.conns[w] == nil {
		c, err := dialRESP(ctx, r.addr())
		if err != nil {
			return nil, err
		}
		r.conns[w] = c
	}
	return r.conns[w], nil
}

// drop closes writer w's connection after a failed exchange.
func (r *redisPeer) drop(w int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns[w] != nil {
		r.conns[w].Close()
		r.conns[w] = nil
	}
}

// setWaitCommands returns the commands of one put: SET, and WAIT when there
// are replicas to wait for.
func setWaitCommands(key string, value []byte, copies int, timeout time.Duration) [][][]byte {
	cmds := [][][]byte{{[]byte("SET"), []byte(key), value}}
	if copies > 1 {
		cmds = append(cmds, [][]byte{[]byte("WAIT"), []byte(strconv.Itoa(copies - 1)),
			[]byte(strconv.FormatInt(timeout.Milliseconds(), 10))})
	}
	return cmds
}

// checkSetWait checks the replies to setWaitCommands.
func checkSetWait(reps []reply, copies int) error {
	if len(reps) == 0 {
		return fmt.Errorf("redis: no reply")
	}
	if err := reps[0].err(); err != nil {
		return err
	}
	if reps[0].kind != '+' || reps[0].str != "OK" {
		return fmt.Errorf("redis: SET replied %c%q", reps[0].kind, reps[0].str)
	}
	if copies > 1 {
		if len(reps) != 2 {
			return fmt.Errorf("redis: %d replies to SET+WAIT", len(reps))
		}
		if err := reps[1].err(); err != nil {
			return err
		}
		if reps[1].kind != ':' {
			return fmt.Errorf("redis: WAIT replied %c", reps[1].kind)
		}
		if reps[1].n < int64(copies-1) {
			return fmt.Errorf("redis: WAIT %d: only %d replicas acknowledged within %v", copies-1, reps[1].n, redisWaitTimeout)
		}
	}
	return nil
}

func (r *redisPeer) Put(ctx context.Context, w int, key string, value []byte) error {
	c, err := r.conn(ctx, w)
	if err != nil {
		return err
	}
	reps, err := c.pipeline(ctx, setWaitCommands(key, value, r.copies, redisWaitTimeout)...)
	if err != nil {
		r.drop(w)
		return err
	}
	return checkSetWait(reps, r.copies)
}

func (r *redisPeer) Get(ctx context.Context, w int, key string) ([]byte, error) {
	c, err := r.conn(ctx, w)
	if err != nil {
		return nil, err
	}
	reps, err := c.pipeline(ctx, [][]byte{[]byte("GET"), []byte(key)})
	if err != nil {
		r.drop(w)
		return nil, err
	}
	if err := reps[0].err(); err != nil {
		return nil, err
	}
	if reps[0].kind != '$' || reps[0].null {
		return nil, fmt.Errorf("redis: GET %s: no value", key)
	}
	return reps[0].bulk, nil
}

func (r *redisPeer) done(copies int) {}

func (r *redisPeer) notes() []string {
	return []string{fmt.Sprintf("Redis %s (%s): one primary and copies-1 replicas on 127.0.0.1, persistence off (save \"\", appendonly no); "+
		"one connection per writer (a RESP client of this benchmark); a put is SET then WAIT copies-1 %d, pipelined in one write, "+
		"and fails unless WAIT reports copies-1 acknowledgements; at copies=1 a put is SET alone. Gets are GET on the primary.",
		r.version, r.how, redisWaitTimeout.Milliseconds())}
}

func (r *redisPeer) closeConns() {
	for i, c := range r.conns {
		if c != nil {
			c.Close()
			r.conns[i] = nil
		}
	}
}

func (r *redisPeer) close() {
	r.mu.Lock()
	r.closeConns()
	r.mu.Unlock()
	if r.admin != nil {
		r.admin.Close()
	}
	for _, p := range r.replicas {
		procs.stop(p, 2*time.Second)
	}
	procs.stop(r.primary, 2*time.Second)
	r.replicas, r.primary = nil, nil
}
