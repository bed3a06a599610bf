package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcd: a 3-member cluster on loopback ports, Debian's etcd-server (or, where
// Debian has none, etcd's server module built with go install at a pinned
// version), driven by the official Go client. Its replication is fixed: every
// member holds every key and a put returns once a majority has it in its
// log, so etcd is measured at copies=3 only. etcd writes every put to its
// write-ahead log with fsync; the data directories are on tmpfs (/dev/shm)
// where there is one, so that fsync costs no disk, as for the in-memory
// stores.

const (
	etcdClient = "go.etcd.io/etcd/client/v3"
	etcdCopies = 3
	// etcdServerVersion of go.etcd.io/etcd/server/v3 is built when Debian
	// has no etcd-server package.
	etcdServerVersion = "v3.5.35"
)

type etcdPeer struct {
	bin     string
	version string
	how     string // how the server was installed
	dir     string // data directories
	tmpfs   bool

	members []*proc
	cli     *clientv3.Client
}

// setupEtcd finds or installs the etcd server.
func setupEtcd(ctx context.Context, in *installer, dir, goBin string) (*etcdPeer, error) {
	e := &etcdPeer{}
	if p, err := exec.LookPath("etcd"); err == nil {
		e.bin, e.how = p, origin(ctx, p)
	} else if canApt() == nil && in.available(ctx, "etcd-server") {
		p, err := in.ensureCommand(ctx, "etcd", "etcd-server")
		if err != nil {
			return nil, err
		}
		e.bin, e.how = p, origin(ctx, p)
	} else {
		p, err := buildEtcd(ctx, in, dir, goBin)
		if err != nil {
			return nil, fmt.Errorf("no etcd on PATH, no Debian etcd-server, and building go.etcd.io/etcd/server/v3 %s failed: %w", etcdServerVersion, err)
		}
		e.bin, e.how = p, "built from go.etcd.io/etcd/server/v3 "+etcdServerVersion
	}
	out, err := runCmd(ctx, 30*time.Second, nil, e.bin, "--version")
	if err != nil {
		return nil, err
	}
	e.version = parseEtcdVersion(string(out))

	base := dir
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "bench-store-etcd-"); err == nil {
			e.dir, e.tmpfs = d, true
		}
	}
	if e.dir == "" {
		e.dir = filepath.Join(base, "etcd")
		if err := os.MkdirAll(e.dir, 0o755); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// buildEtcd builds etcd's server from its Go module at a pinned version
// (from the Go module proxy: no prebuilt binaries) in a scratch module
// under dir, whose main calls etcdmain.Main as etcd's own main does. (go
// install module@version refuses etcd's server module: its go.mod has
// replace directives.)
func buildEtcd(ctx context.Context, in *installer, dir, goBin string) (string, error) {
	if goBin == "" {
		return "", errors.New("no go command")
	}
	src := filepath.Join(dir, "etcd-build")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	files := map[string]string{
		"go.mod":  etcdBuildGoMod,
		"main.go": etcdBuildMain,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(in.log, "building etcd %s from the Go module proxy (a few minutes)\n", etcdServerVersion)
	bin := filepath.Join(src, "etcd")
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	for _, argv := range [][]string{
		{goBin, "mod", "tidy"},
		{goBin, "build", "-o", bin, "."},
	} {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, tailString(out, 15))
		}
	}
	return bin, nil
}

// The scratch module buildEtcd builds.
const (
	etcdBuildGoMod = "module benchstore/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 " + etcdServerVersion + "\n"
	etcdBuildMain  = `// Command etcd is etcd's server, built by bench/store.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
`
)

// parseEtcdVersion picks the version from "etcd Version: 3.4.23\n...".
func parseEtcdVersion(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "etcd Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "(unknown version)"
}

// etcdArgs is the command line of member i of a cluster whose members listen
// for clients on clientPorts and for peers on peerPorts, all on 127.0.0.1.
func etcdArgs(bin, dataDir, token string, i int, clientPorts, peerPorts []int) []string {
	var initial []string
	for j, p := range peerPorts {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", j, p))
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPorts[i])
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPorts[i])
	return []string{bin,
		"--name", fmt.Sprintf("m%d", i),
		"--data-dir", dataDir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", token,
		"--logger", "zap",
		"--log-outputs", "stderr",
	}
}

func (e *etcdPeer) supports(copies int) string {
	if copies != etcdCopies {
		return fmt.Sprintf("etcd runs %d members, each with every key: measured at copies=%d only", etcdCopies, etcdCopies)
	}
	return ""
}

func (e *etcdPeer) prepare(ctx context.Context, copies, writers int) (kv, error) {
	if msg := e.supports(copies); msg != "" {
		return nil, errors.New(msg)
	}
	if e.cli != nil {
		return e, nil
	}
	ports, err := freePorts(2 * etcdCopies)
	if err != nil {
		return nil, err
	}
	clientPorts, peerPorts := ports[:etcdCopies], ports[etcdCopies:]
	token := fmt.Sprintf("bench-store-%d-%d", os.Getpid(), time.Now().UnixNano())
	var endpoints []string
	for i := range etcdCopies {
		name := fmt.Sprintf("etcd-m%d", i)
		data := filepath.Join(e.dir, name)
		os.RemoveAll(data)
		p, err := procs.start(name, filepath.Join(e.dir, name+".log"),
			etcdArgs(e.bin, data, token, i, clientPorts, peerPorts), nil, e.dir)
		if err != nil {
			e.stopMembers()
			return nil, err
		}
		e.members = append(e.members, p)
		endpoints = append(endpoints, fmt.Sprintf("127.0.0.1:%d", clientPorts[i]))
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		e.stopMembers()
		return nil, err
	}
	// Ready once a put goes through (a leader is elected).
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(wctx, 5*time.Second)
		_, err := cli.Put(pctx, "bench-ready", "1")
		pcancel()
		if err == nil {
			break
		}
		for _, m := range e.members {
			if m.exited() {
				b, _ := os.ReadFile(m.log)
				cli.Close()
				e.stopMembers()
				return nil, fmt.Errorf("etcd %s exited (%v):\n%s", m.name, m.err, tailString(b, 10))
			}
		}
		if wctx.Err() != nil {
			cli.Close()
			e.stopMembers()
			return nil, fmt.Errorf("etcd: no put went through within 90s: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.cli = cli
	return e, nil
}

func (e *etcdPeer) Put(ctx context.Context, w int, key string, value []byte) error {
	_, err := e.cli.Put(ctx, key, string(value))
	return err
}

func (e *etcdPeer) Get(ctx context.Context, w int, key string) ([]byte, error) {
	resp, err := e.cli.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) != 1 {
		return nil, fmt.Errorf("etcd: get %s: %d values", key, len(resp.Kvs))
	}
	return resp.Kvs[0].Value, nil
}

// done stops the cluster after its one copy count, to free the CPUs.
func (e *etcdPeer) done(copies int) { e.shutdown() }

func (e *etcdPeer) notes() []string {
	where := "data directories on tmpfs (/dev/shm), so its fsyncs cost no disk"
	if !e.tmpfs {
		where = "data directories on disk (no /dev/shm): every put pays an fsync"
	}
	return []string{fmt.Sprintf("etcd %s (%s): a %d-member cluster on 127.0.0.1, %s; client %s %s (one client shared by the writers); "+
		"a put is Put, a get a linearizable Get. etcd's replication is fixed (every member holds every key; a put returns once a majority has it), "+
		"so it is reported at copies=%d only.",
		e.version, e.how, etcdCopies, where, etcdClient, moduleVersion(etcdClient), etcdCopies)}
}

func (e *etcdPeer) stopMembers() {
	for _, p := range e.members {
		procs.stop(p, 3*time.Second)
	}
	e.members = nil
}

func (e *etcdPeer) shutdown() {
	if e.cli != nil {
		e.cli.Close()
		e.cli = nil
	}
	e.stopMembers()
}

// close stops the cluster and removes the data directories from tmpfs
// (where they use memory; a directory under the driver's temporary
// directory goes with it).
func (e *etcdPeer) close() {
	e.shutdown()
	if e.tmpfs && strings.HasPrefix(e.dir, "/dev/shm/bench-store-etcd-") {
		os.RemoveAll(e.dir)
	}
}
