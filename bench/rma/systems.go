package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ftrma/ftrma/internal/result"
)

// The system names, as they appear in the table, the JSON and -only.
const (
	sysFtrmaTCP = "ftrma-tcp" // ftrun --transport tcp
	// ftrun --transport tcp with FTRMA_SEAL=all: the connection sealed
	// (encrypted and authenticated) as between hosts, on loopback too
	sysFtrmaTCPSealed = "ftrma-tcp-sealed"
	sysOpenMPITCP     = "openmpi-tcp" // Open MPI, osc pt2pt over btl tcp
	sysFtrmaSHM       = "ftrma-shm"   // ftrun --transport shm
	// ftrun --transport shm with FTRMA_SHM_SLOWPATH=1: every operation on
	// the slow path (mapping lock and active counts), as before the fast path
	sysFtrmaSHMSlow = "ftrma-shm-slow"
	sysOpenMPISHM   = "openmpi-shm" // Open MPI, osc sm over btl vader
	sysMPICH        = "mpich"       // MPICH with its defaults
)

// allSystems is every system, in the order a round runs them and the table
// shows them: each ftrma transport next to its Open MPI counterpart.
var allSystems = []string{sysFtrmaTCP, sysFtrmaTCPSealed, sysOpenMPITCP, sysFtrmaSHM, sysFtrmaSHMSlow, sysOpenMPISHM, sysMPICH}

// sharedMemory reports whether system name moves data through shared
// memory (it runs the plan scaled by sharedMemoryScale). Every ratio pair
// is two systems of the same kind.
func sharedMemory(name string) bool {
	switch name {
	case sysFtrmaSHM, sysFtrmaSHMSlow, sysOpenMPISHM, sysMPICH:
		return true
	}
	return false
}

// ratioPairs are the table's ratio columns, a/b: ftrma against the MPI that
// moves data the same way.
var ratioPairs = [][2]string{
	{sysFtrmaTCP, sysOpenMPITCP},
	{sysFtrmaTCPSealed, sysFtrmaTCP},
	{sysFtrmaTCPSealed, sysOpenMPITCP},
	{sysFtrmaSHM, sysOpenMPISHM},
	{sysFtrmaSHM, sysFtrmaSHMSlow},
	{sysFtrmaSHM, sysMPICH},
}

// parseOnly turns -only's comma-separated list into systems in allSystems
// order; "" means every system.
func parseOnly(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return slices.Clone(allSystems), nil
	}
	asked := make(map[string]bool)
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allSystems, f) {
			return nil, fmt.Errorf("-only: unknown system %q; want one or more of %s, separated by commas",
				f, strings.Join(allSystems, ", "))
		}
		asked[f] = true
	}
	var out []string
	for _, name := range allSystems {
		if asked[name] {
			out = append(out, name)
		}
	}
	return out, nil
}

// checkFtrunArgs rejects -ftrun-args that choose a transport: each ftrma
// system's name says which one it runs.
func checkFtrunArgs(args []string) error {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "transport" {
			return fmt.Errorf("-ftrun-args %q: the transport is set per system (%s, %s); use -only to pick one",
				a, sysFtrmaTCP, sysFtrmaSHM)
		}
	}
	return nil
}

//go:embed mpi/rma_bench.c
var mpiSource []byte

// system is one side of the comparison, ready to run or with the reason it
// cannot.
type system struct {
	name    string
	argv    []string // command for one run; the plan's flags are appended
	env     []string // added to the environment
	missing string   // why the system cannot run; "" when it can
	notes   []string // facts to print with the results
}

// missingAll returns a missing system for each of names, all for one reason.
func missingAll(names []string, why string) []*system {
	var out []*system
	for _, n := range names {
		out = append(out, &system{name: n, missing: why})
	}
	return out
}

// ftrmaTransports maps the ftrma systems to ftrun's --transport.
var ftrmaTransports = map[string]string{sysFtrmaTCP: "tcp", sysFtrmaTCPSealed: "tcp", sysFtrmaSHM: "shm", sysFtrmaSHMSlow: "shm"}

// ftrmaArgv is the command of one ftrma run: the same rank program under
// ftrun with the given transport. ftrun's default (auto) is shared memory on
// one host, so the TCP side must ask for tcp explicitly.
func ftrmaArgv(ftrun, rank, transport string, extra []string) []string {
	argv := []string{ftrun, "--transport", transport}
	argv = append(argv, extra...)
	return append(argv, "-n", "2", rank)
}

// setupFtrma builds cmd/ftrun and the rank program into dir and returns the
// ftrma systems among names.
func setupFtrma(ctx context.Context, goBin, root, dir string, ftrunArgs, names []string) []*system {
	ftrun := filepath.Join(dir, "ftrun")
	rank := filepath.Join(dir, "ftrma-rank")
	for _, b := range []struct{ out, pkg string }{{ftrun, "./cmd/ftrun"}, {rank, "./bench/rma/rank"}} {
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", b.out, b.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return missingAll(names, fmt.Sprintf("go build %s failed: %v\n%s", b.pkg, err, tail(out, 15)))
		}
	}
	var out []*system
	for _, name := range names {
		tr := ftrmaTransports[name]
		s := &system{name: name, argv: ftrmaArgv(ftrun, rank, tr, ftrunArgs)}
		s.notes = append(s.notes, fmt.Sprintf("ftrun --transport %s", tr))
		if name == sysFtrmaTCPSealed {
			s.env = append(s.env, "FTRMA_SEAL=all")
			s.notes = append(s.notes, "FTRMA_SEAL=all: the connection sealed as between hosts (AES-128-GCM records), loopback too")
		}
		if name == sysFtrmaSHMSlow {
			s.env = append(s.env, "FTRMA_SHM_SLOWPATH=1")
			s.notes = append(s.notes, "FTRMA_SHM_SLOWPATH=1: every operation on the shm transport's slow path (its mapping lock and the target's active count: four read-modify-writes)")
		}
		if len(ftrunArgs) > 0 {
			s.notes = append(s.notes, fmt.Sprintf("ftrun extra arguments: %q", ftrunArgs))
		}
		out = append(out, s)
	}
	return out
}

// oscPreference lists the Open MPI one-sided components that can run over
// TCP alone, best first. pt2pt emulates RMA with point-to-point messages over
// pml ob1 + btl tcp (the same approach as ftrma's TCP transport); Open MPI 5
// dropped it. ucx, limited to UCX's tcp transport, is the fallback. (osc rdma
// is no use: in Debian's 4.1.4 it fails MPI_Win_allocate over btl tcp.)
var oscPreference = []string{"pt2pt", "ucx"}

// oscRDMANote says why openmpi-shm does not run Open MPI's default one-sided
// component on one host, osc rdma. Over btl vader in Debian 12's Open MPI
// 4.1.4 it crashes: the target dies with SIGSEGV in mca_btl_vader during the
// origin's MPI_Compare_and_swap. osc sm does what ftrma's shm transport does
// (the origin loads, stores and runs the atomics on the target's memory,
// mapped into its own address space), so openmpi-shm uses it.
const oscRDMANote = "uses osc sm, not Open MPI's default one-sided component osc rdma: over btl vader, osc rdma segfaults on MPI_Compare_and_swap on this machine (Debian 12's Open MPI 4.1.4; the target rank dies in mca_btl_vader)"

// openMPIArgv is the command of one Open MPI run of bin.
//
//   - tcp: osc (pt2pt or ucx) over pml ob1 + btl self,tcp, loopback only;
//     for osc ucx, UCX is kept to its tcp transport on lo.
//   - shm: osc sm over pml ob1 + btl self,shmBTL (vader in 4.1, sm in 5.0).
func openMPIArgv(mpirun, bin, transport, osc, shmBTL string) []string {
	argv := []string{mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ob1"}
	switch transport {
	case "tcp":
		argv = append(argv,
			"--mca", "btl", "self,tcp",
			"--mca", "osc", osc,
			"--mca", "btl_tcp_if_include", "lo")
	case "shm":
		argv = append(argv,
			"--mca", "btl", "self,"+shmBTL,
			"--mca", "osc", "sm")
	}
	argv = append(argv, "--mca", "oob_tcp_if_include", "lo")
	if transport == "tcp" && osc == "ucx" {
		// UCX picks its own transports: keep it to TCP on loopback.
		argv = append(argv, "-x", "UCX_TLS=self,tcp", "-x", "UCX_NET_DEVICES=lo")
	}
	return append(argv, "-np", "2", bin)
}

// setupOpenMPI makes sure Open MPI is installed (installing it with apt-get
// when its tools are missing), picks the components and compiles rma_bench.c
// into dir once for both Open MPI systems among names. Progress goes to log.
func setupOpenMPI(ctx context.Context, dir string, a *apt, log *bytes.Buffer, names []string) []*system {
	tools, err := ensureTools(ctx, a, log, "Open MPI", []string{"openmpi-bin", "libopenmpi-dev"},
		[][]string{{"mpicc.openmpi", "mpicc"}, {"mpirun.openmpi", "mpirun"}, {"ompi_info"}})
	if err != nil {
		return missingAll(names, err.Error())
	}
	mpicc, mpirun, ompiInfo := tools[0], tools[1], tools[2]

	out, err := exec.CommandContext(ctx, ompiInfo).Output()
	if err != nil {
		return missingAll(names, fmt.Sprintf("ompi_info failed: %v (is this Open MPI?)", err))
	}
	info := parseOmpiInfo(out)

	bin := filepath.Join(dir, "rma_bench-openmpi")
	if err := compileMPI(ctx, mpicc, bin); err != nil {
		return missingAll(names, err.Error())
	}

	var systems []*system
	for _, name := range names {
		s := &system{name: name}
		systems = append(systems, s)
		switch name {
		case sysOpenMPITCP:
			osc := ""
			for _, c := range oscPreference {
				if info.osc[c] {
					osc = c
					break
				}
			}
			switch {
			case osc == "":
				s.missing = fmt.Sprintf("Open MPI %s has none of the osc components %v that work over TCP (it has %v)",
					info.version, oscPreference, keys(info.osc))
				continue
			case osc == "ucx":
				s.notes = append(s.notes, fmt.Sprintf("Open MPI %s has no osc pt2pt; using osc ucx with UCX_TLS=self,tcp on lo instead", info.version))
			default:
				s.notes = append(s.notes, fmt.Sprintf("Open MPI %s, osc pt2pt over pml ob1 + btl self,tcp on lo", info.version))
			}
			s.argv = openMPIArgv(mpirun, bin, "tcp", osc, "")
		case sysOpenMPISHM:
			btl := info.shmBTL()
			if !info.osc["sm"] || btl == "" {
				s.missing = fmt.Sprintf("Open MPI %s lacks osc sm or a shared-memory btl (vader or sm); it has osc %v, btl %v",
					info.version, keys(info.osc), keys(info.btl))
				continue
			}
			s.notes = append(s.notes,
				fmt.Sprintf("Open MPI %s, osc sm over pml ob1 + btl self,%s (shared memory)", info.version, btl),
				oscRDMANote)
			s.argv = openMPIArgv(mpirun, bin, "shm", "", btl)
		}
	}
	return systems
}

// compileMPI writes rma_bench.c next to bin (as bin.c: setups run at the same
// time) and compiles it with mpicc into bin.
func compileMPI(ctx context.Context, mpicc, bin string) error {
	src := bin + ".c"
	if err := os.WriteFile(src, mpiSource, 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, mpicc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		return fmt.Errorf("%s failed: %v\n%s", filepath.Base(mpicc), err, tail(out, 15))
	}
	return nil
}

// mpichArgv is the command of one MPICH run of bin: two processes on this
// host with MPICH's defaults (which use shared memory within a node).
func mpichArgv(mpiexec, bin string) []string {
	return []string{mpiexec, "-n", "2", bin}
}

// setupMPICH makes sure MPICH is installed next to Open MPI (Debian's mpich
// and libmpich-dev, whose tools carry a .mpich suffix) and compiles
// rma_bench.c with it into dir. Progress goes to log.
func setupMPICH(ctx context.Context, dir string, a *apt, log *bytes.Buffer) *system {
	s := &system{name: sysMPICH}
	tools, err := ensureTools(ctx, a, log, "MPICH", []string{"mpich", "libmpich-dev"},
		[][]string{{"mpicc.mpich"}, {"mpiexec.mpich", "mpirun.mpich"}})
	if err != nil {
		s.missing = err.Error()
		return s
	}
	mpicc, mpiexec := tools[0], tools[1]
	bin := filepath.Join(dir, "rma_bench-mpich")
	if err := compileMPI(ctx, mpicc, bin); err != nil {
		s.missing = err.Error()
		return s
	}
	version, device := "(unknown version)", "(unknown device)"
	if p, missing := lookTools([][]string{{"mpichversion.mpich", "mpichversion"}}); missing == "" {
		if out, err := exec.CommandContext(ctx, p[0]).Output(); err == nil {
			version, device = parseMPICHVersion(out)
		}
	}
	s.notes = append(s.notes, fmt.Sprintf("MPICH %s, device %s, default settings: %s -n 2", version, device, filepath.Base(mpiexec)))
	s.argv = mpichArgv(mpiexec, bin)
	return s
}

// parseMPICHVersion returns MPICH's version and device from mpichversion's
// output, whose lines look like (Debian 12's, with tabs)
//
//	MPICH Version:    	4.0.2
//	MPICH Device:    	ch4:ucx
func parseMPICHVersion(out []byte) (version, device string) {
	version, device = "(unknown version)", "(unknown device)"
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "MPICH Version":
			version = strings.TrimSpace(v)
		case "MPICH Device":
			device = strings.TrimSpace(v)
		}
	}
	return version, device
}

// apt installs Debian packages for setups that run at the same time: it runs
// one apt-get at a time (dpkg holds a lock) and apt-get update once.
type apt struct {
	mu        sync.Mutex // guards updated and updateErr, and serialises apt-get
	updated   bool
	updateErr error
}

// install installs pkgs with apt-get, as root, without questions.
func (a *apt) install(ctx context.Context, pkgs []string) error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return errors.New("there is no apt-get to install them with")
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("installing them needs root: apt-get install %s", strings.Join(pkgs, " "))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	aptGet := func(args ...string) error {
		// Wait for a dpkg lock held by another process instead of failing.
		args = append([]string{"-o", "DPkg::Lock::Timeout=120"}, args...)
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s failed: %v\n%s", strings.Join(args[2:], " "), err, tail(out, 15))
		}
		return nil
	}
	if !a.updated {
		a.updated = true
		a.updateErr = aptGet("update")
	}
	if a.updateErr != nil {
		return a.updateErr
	}
	return aptGet(append([]string{"install", "-y"}, pkgs...)...)
}

// ensureTools finds each tool (the first of its alternative names on PATH),
// installing pkgs with apt-get first when any is missing. what names the
// software in messages.
func ensureTools(ctx context.Context, a *apt, log *bytes.Buffer, what string, pkgs []string, tools [][]string) ([]string, error) {
	paths, missing := lookTools(tools)
	if missing == "" {
		return paths, nil
	}
	fmt.Fprintf(log, "%s: %s not found: installing %s with apt-get\n", what, missing, strings.Join(pkgs, " "))
	if err := a.install(ctx, pkgs); err != nil {
		return nil, fmt.Errorf("%s not found and %s could not be installed: %w", missing, what, err)
	}
	paths, missing = lookTools(tools)
	if missing != "" {
		return nil, fmt.Errorf("apt-get installed %s but %s is still not on PATH", strings.Join(pkgs, " "), missing)
	}
	fmt.Fprintf(log, "%s: installed %s\n", what, strings.Join(paths, " "))
	return paths, nil
}

// lookTools returns the path of each tool, or the name of the first one
// missing.
func lookTools(tools [][]string) (paths []string, missing string) {
	for _, alts := range tools {
		found := ""
		for _, name := range alts {
			if p, err := exec.LookPath(name); err == nil {
				found = p
				break
			}
		}
		if found == "" {
			return nil, strings.Join(alts, " or ")
		}
		paths = append(paths, found)
	}
	return paths, ""
}

// ompiInfo is what the driver needs from ompi_info.
type ompiInfo struct {
	version  string
	osc, btl map[string]bool // components present
}

// shmBTL is Open MPI's shared-memory btl: vader in 4.x, renamed sm in 5.0;
// "" when neither is there.
func (i ompiInfo) shmBTL() string {
	for _, b := range []string{"vader", "sm"} {
		if i.btl[b] {
			return b
		}
	}
	return ""
}

// parseOmpiInfo reads Open MPI's version and its osc and btl components from
// ompi_info's default output, whose lines look like
//
//	Open MPI: 4.1.4
//	MCA osc: pt2pt (MCA v2.1.0, API v3.0.0, Component v4.1.4)
func parseOmpiInfo(out []byte) ompiInfo {
	info := ompiInfo{osc: make(map[string]bool), btl: make(map[string]bool)}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "Open MPI:"); ok && info.version == "" {
			info.version = strings.TrimSpace(v)
		}
		for _, fw := range []struct {
			prefix string
			m      map[string]bool
		}{{"MCA osc:", info.osc}, {"MCA btl:", info.btl}} {
			if c, ok := strings.CutPrefix(line, fw.prefix); ok {
				if f := strings.Fields(c); len(f) > 0 {
					fw.m[f[0]] = true
				}
			}
		}
	}
	if info.version == "" {
		info.version = "(unknown version)"
	}
	return info
}

// keys returns m's keys, sorted.
func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// runOnce runs one round of s with the plan's flags and returns the results it
// printed (System set). A run that fails after printing some results returns
// them together with the error.
func runOnce(ctx context.Context, s *system, args []string, timeout time.Duration) ([]result.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := append(append([]string(nil), s.argv...), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), s.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ownGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()

	var rs []result.Result
	var parseErr error
	for _, line := range strings.Split(stdout.String(), "\n") {
		r, ok, err := result.ParseLine(line)
		if err != nil && parseErr == nil {
			parseErr = err
		}
		if ok {
			r.System = s.name
			rs = append(rs, r)
		}
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return rs, fmt.Errorf("timed out after %v\n%s", timeout, tail(stderr.Bytes(), 10))
	case runErr != nil:
		return rs, fmt.Errorf("%v\n%s", runErr, tail(append(stderr.Bytes(), stdout.Bytes()...), 10))
	case parseErr != nil:
		return rs, parseErr
	}
	return rs, nil
}

// tail returns the last n lines of b, indented.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}
