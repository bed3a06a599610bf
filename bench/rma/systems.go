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
	"strings"
	"time"

	"github.com/ftrma/ftrma/bench/internal/result"
)

// The system names, as they appear in the table and the JSON.
const (
	sysFtrma   = "ftrma-tcp"
	sysOpenMPI = "openmpi-tcp"
)

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

// setupFtrma builds cmd/ftrun and the rank program into dir.
func setupFtrma(ctx context.Context, goBin, root, dir string, ftrunArgs []string) *system {
	s := &system{name: sysFtrma}
	ftrun := filepath.Join(dir, "ftrun")
	rank := filepath.Join(dir, "ftrma-rank")
	for _, b := range []struct{ out, pkg string }{{ftrun, "./cmd/ftrun"}, {rank, "./bench/rma/rank"}} {
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", b.out, b.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			s.missing = fmt.Sprintf("go build %s failed: %v\n%s", b.pkg, err, tail(out, 15))
			return s
		}
	}
	s.argv = append([]string{ftrun}, ftrunArgs...)
	s.argv = append(s.argv, "-n", "2", rank)
	if len(ftrunArgs) > 0 {
		s.notes = append(s.notes, fmt.Sprintf("ftrun extra arguments: %q", ftrunArgs))
	}
	return s
}

// oscPreference lists the Open MPI one-sided components that can run over
// TCP alone, best first. pt2pt emulates RMA with point-to-point messages over
// pml ob1 + btl tcp (the same approach as ftrma's TCP transport); Open MPI 5
// dropped it. ucx, limited to UCX's tcp transport, is the fallback. (osc rdma
// is no use: in Debian's 4.1.4 it fails MPI_Win_allocate over btl tcp.)
var oscPreference = []string{"pt2pt", "ucx"}

// setupOpenMPI makes sure Open MPI is installed (installing it with apt-get
// when mpicc is missing), picks the osc component and compiles rma_bench.c
// into dir. Progress goes to log.
func setupOpenMPI(ctx context.Context, dir string, log *bytes.Buffer) *system {
	s := &system{name: sysOpenMPI}
	mpicc, err := ensureOpenMPI(ctx, log)
	if err != nil {
		s.missing = err.Error()
		return s
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		s.missing = "mpicc is installed but mpirun is not (install openmpi-bin)"
		return s
	}

	info, err := exec.CommandContext(ctx, "ompi_info").Output()
	if err != nil {
		s.missing = fmt.Sprintf("ompi_info failed: %v (is this Open MPI?)", err)
		return s
	}
	version, oscs := parseOmpiInfo(info)
	osc := ""
	for _, c := range oscPreference {
		if oscs[c] {
			osc = c
			break
		}
	}
	switch {
	case osc == "":
		s.missing = fmt.Sprintf("Open MPI %s has none of the osc components %v that work over TCP (it has %v)",
			version, oscPreference, keys(oscs))
		return s
	case osc == "ucx":
		s.notes = append(s.notes, fmt.Sprintf("Open MPI %s has no osc pt2pt; using osc ucx with UCX_TLS=self,tcp on lo instead", version))
	default:
		s.notes = append(s.notes, fmt.Sprintf("Open MPI %s, osc pt2pt over pml ob1 + btl tcp on lo", version))
	}

	src := filepath.Join(dir, "rma_bench.c")
	bin := filepath.Join(dir, "rma_bench")
	if err := os.WriteFile(src, mpiSource, 0o644); err != nil {
		s.missing = err.Error()
		return s
	}
	if out, err := exec.CommandContext(ctx, mpicc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		s.missing = fmt.Sprintf("mpicc failed: %v\n%s", err, tail(out, 15))
		return s
	}
	s.argv = []string{mpirun,
		"--allow-run-as-root", "--oversubscribe",
		"--mca", "pml", "ob1",
		"--mca", "btl", "self,tcp",
		"--mca", "osc", osc,
		"--mca", "btl_tcp_if_include", "lo",
		"--mca", "oob_tcp_if_include", "lo"}
	if osc == "ucx" {
		// UCX picks its own transports: keep it to TCP on loopback.
		s.argv = append(s.argv, "-x", "UCX_TLS=self,tcp", "-x", "UCX_NET_DEVICES=lo")
	}
	s.argv = append(s.argv, "-np", "2", bin)
	return s
}

// ensureOpenMPI returns the path of mpicc, first installing Debian's
// openmpi-bin and libopenmpi-dev when it is missing.
func ensureOpenMPI(ctx context.Context, log *bytes.Buffer) (string, error) {
	if p, err := exec.LookPath("mpicc"); err == nil {
		return p, nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", errors.New("mpicc not found and there is no apt-get to install Open MPI with")
	}
	if os.Geteuid() != 0 {
		return "", errors.New("mpicc not found; installing Open MPI needs root: apt-get install openmpi-bin libopenmpi-dev")
	}
	fmt.Fprintln(log, "mpicc not found: installing openmpi-bin and libopenmpi-dev with apt-get")
	for _, args := range [][]string{
		{"update"},
		{"install", "-y", "openmpi-bin", "libopenmpi-dev"},
	} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("apt-get %s failed: %v\n%s", args[0], err, tail(out, 15))
		}
	}
	p, err := exec.LookPath("mpicc")
	if err != nil {
		return "", errors.New("apt-get installed Open MPI but mpicc is still not on PATH")
	}
	fmt.Fprintln(log, "installed Open MPI:", p)
	return p, nil
}

// parseOmpiInfo returns Open MPI's version and its osc components from
// ompi_info's default output, whose lines look like
//
//	Open MPI: 4.1.4
//	MCA osc: pt2pt (MCA v2.1.0, API v3.0.0, Component v4.1.4)
func parseOmpiInfo(out []byte) (version string, osc map[string]bool) {
	osc = make(map[string]bool)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "Open MPI:"); ok && version == "" {
			version = strings.TrimSpace(v)
		}
		if c, ok := strings.CutPrefix(line, "MCA osc:"); ok {
			if f := strings.Fields(c); len(f) > 0 {
				osc[f[0]] = true
			}
		}
	}
	if version == "" {
		version = "(unknown version)"
	}
	return version, osc
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
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
