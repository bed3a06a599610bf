package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
)

// DefaultDir is the host's shared-memory file system, where the job
// directories (JobDir) are.
const DefaultDir = "/dev/shm"

// JobDir is the directory of job's files under base (DefaultDir when
// empty): base/ftrma-<job>, the default Config.Dir. See "A private place"
// in the package documentation.
func JobDir(base, job string) string {
	if base == "" {
		base = DefaultDir
	}
	return filepath.Join(base, "ftrma-"+job)
}

// EnvSlowPath is the environment variable that, set to 1, sets
// Config.SlowPath in every transport the process opens.
const EnvSlowPath = "FTRMA_SHM_SLOWPATH"

// Config configures a shared-memory transport. The zero value of each field
// means its default.
type Config struct {
	// Rank is this process's rank and Size the number of ranks of the job
	// (at most 65536). Required.
	Rank ftrma.Rank
	Size int
	// Ranks lists the ranks this transport connects: the job's ranks on this
	// host, Rank among them, in any order. Every rank listed must open its
	// transport with the same list (Open records it in the control segment
	// and peers check it). Operations, Send, Fence and PeerDown toward a rank
	// not listed fail with ftrma.ErrInvalid; such ranks are never mapped and
	// take no room in the control segment. Default (nil): all Size ranks,
	// every one of them on this host.
	Ranks []ftrma.Rank
	// Absent lists ranks of Ranks that have not started (spares of a job
	// started with spares): their slots are in the control segment from the
	// start, so that they can be admitted later (transport.Admitter), but
	// Connect does not wait for them, operations toward them fail with
	// transport.ErrAbsent, and what they send stays in their ring until
	// Admit. A spare that starts later lists here the spares not started
	// yet, and reports the ranks that failed before it with PeerDown before
	// Connect.
	Absent []ftrma.Rank
	// Job names the job in file names; every rank of a job uses the same.
	// 1 to 128 characters from [A-Za-z0-9._-]. Required.
	Job string
	// Dir is the directory of the job's files; default JobDir("", Job).
	// Open makes it (mode 0700) if it is missing, and refuses it unless it
	// is a private directory of this user (PrepareDir). Every rank of a job
	// must use the same.
	Dir string
	// Spin is how long the progress goroutine busy-polls the incoming rings
	// after its last message before parking on its doorbell, and how long a
	// sender polls a full ring before parking. Default 10µs when the host has
	// at least two CPUs per rank (a rank's application and its progress
	// goroutine each need one while the progress goroutine spins), else
	// none; negative disables busy-polling.
	Spin time.Duration
	// RingBytes is the capacity, in bytes, of each incoming message ring
	// (one per peer, in this rank's control segment). Default 128 KiB for
	// up to 16 served ranks, then 2 MiB divided by their number, at least 8
	// KiB, so that a host's rings take at most about 2 MiB per rank (512
	// MiB for 256 ranks) even if every rank talks to every other; rounded
	// up to a multiple of 8; at least 4 KiB, at most 1 GiB. A message larger
	// than half a ring goes in pieces.
	RingBytes int
	// Regions is how many regions may be registered at once: the size of the
	// key table peers resolve keys in. Default 4096; rounded up to a power of
	// two; at most 1<<20.
	Regions int
	// DrainTimeout bounds how long Deregister and Fence wait for a peer's
	// operation under way on this rank's memory when the peer is neither
	// down nor exited (a peer stopped in the middle of an operation).
	// Default 5s.
	DrainTimeout time.Duration
	// SlowPath makes every one-sided operation take the slow path (the
	// peer's mapping lock and the target's active count, four
	// read-modify-writes) even where the fast path could (see "The fast
	// path" in the package documentation): to measure one against the
	// other, or to work around a kernel whose membarrier misbehaves. The
	// environment variable EnvSlowPath=1 sets it too (ftrun passes it on
	// to the ranks from its own environment).
	SlowPath bool
	// Logger logs lost peers and anomalies (warnings), with the field
	// rank; nil means ftrma.Logger().
	Logger *slog.Logger
}

const (
	defaultSpin         = 10 * time.Microsecond
	defaultRingBytes    = 128 << 10
	ringBytesPerHost    = 2 << 20 // times the served ranks: the default rings' memory per host, at most
	minDefaultRing      = 8 << 10
	minRingBytes        = 4 << 10
	maxRingBytes        = 1 << 30
	defaultRegions      = 4096
	maxRegions          = 1 << 20
	defaultDrainTimeout = 5 * time.Second
	maxJob              = 128
	maxSize             = 1 << 16

	// msgHeader is the length prefix of a message in a ring.
	msgHeader = 8
)

// withDefaults validates cfg and fills in its defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Size < 1 || cfg.Size > maxSize || cfg.Rank < 0 || int(cfg.Rank) >= cfg.Size {
		return cfg, fmt.Errorf("shm transport: rank %d of size %d: %w", cfg.Rank, cfg.Size, ftrma.ErrRankOutOfRange)
	}
	if err := checkJob(cfg.Job); err != nil {
		return cfg, err
	}
	ranks, err := servedRanks(cfg.Rank, cfg.Size, cfg.Ranks)
	if err != nil {
		return cfg, err
	}
	cfg.Ranks = ranks
	for _, r := range cfg.Absent {
		if _, ok := slices.BinarySearch(ranks, r); !ok || r == cfg.Rank {
			return cfg, fmt.Errorf("shm transport: absent rank %d is this rank or not in Ranks: %w", r, ftrma.ErrInvalid)
		}
	}
	if cfg.Dir == "" {
		cfg.Dir = JobDir("", cfg.Job)
	}
	switch {
	case cfg.Spin < 0:
		cfg.Spin = 0
	case cfg.Spin == 0 && 2*len(cfg.Ranks) > runtime.NumCPU():
		// A spinning progress goroutine would take the CPU of its own
		// application or of the peer it waits for.
	case cfg.Spin == 0:
		cfg.Spin = defaultSpin
	}
	if cfg.RingBytes == 0 {
		cfg.RingBytes = defaultRingBytes
		if m := len(cfg.Ranks); m > ringBytesPerHost/defaultRingBytes {
			cfg.RingBytes = max(ringBytesPerHost/m, minDefaultRing)
		}
	}
	cfg.RingBytes = (cfg.RingBytes + 7) &^ 7
	if cfg.RingBytes < minRingBytes || cfg.RingBytes > maxRingBytes {
		return cfg, fmt.Errorf("shm transport: ring of %d bytes, want %d to %d: %w", cfg.RingBytes, minRingBytes, maxRingBytes, ftrma.ErrInvalid)
	}
	if cfg.Regions == 0 {
		cfg.Regions = defaultRegions
	}
	if cfg.Regions < 0 || cfg.Regions > maxRegions {
		return cfg, fmt.Errorf("shm transport: %d regions, want 1 to %d: %w", cfg.Regions, maxRegions, ftrma.ErrInvalid)
	}
	for n := 1; ; n <<= 1 {
		if n >= cfg.Regions {
			cfg.Regions = n
			break
		}
	}
	if os.Getenv(EnvSlowPath) == "1" {
		cfg.SlowPath = true
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = defaultDrainTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = ftrma.Logger()
	}
	return cfg, nil
}

// servedRanks checks the ranks a transport is to connect and returns them
// sorted, in a slice of their own: all size ranks when ranks is nil.
func servedRanks(self ftrma.Rank, size int, ranks []ftrma.Rank) ([]ftrma.Rank, error) {
	if ranks == nil {
		all := make([]ftrma.Rank, size)
		for r := range all {
			all[r] = ftrma.Rank(r)
		}
		return all, nil
	}
	out := slices.Clone(ranks)
	slices.Sort(out)
	for i, r := range out {
		if r < 0 || int(r) >= size {
			return nil, fmt.Errorf("shm transport: Ranks lists rank %d of a job of %d: %w", r, size, ftrma.ErrRankOutOfRange)
		}
		if i > 0 && out[i-1] == r {
			return nil, fmt.Errorf("shm transport: Ranks lists rank %d twice: %w", r, ftrma.ErrInvalid)
		}
	}
	if _, ok := slices.BinarySearch(out, self); !ok {
		return nil, fmt.Errorf("shm transport: Ranks does not list this rank (%d): %w", self, ftrma.ErrInvalid)
	}
	return out, nil
}

// ranksSum is a fingerprint of the sorted list of served ranks (FNV-1a of
// their values), recorded in the control segment so that ranks that were
// given different lists refuse each other instead of misreading each
// other's rings.
func ranksSum(ranks []ftrma.Rank) uint64 {
	h := uint64(14695981039346656037)
	for _, r := range ranks {
		for v, i := uint32(r), 0; i < 4; i, v = i+1, v>>8 {
			h ^= uint64(v & 0xff)
			h *= 1099511628211
		}
	}
	return h
}

// checkJob accepts job names that are safe in a file name.
func checkJob(job string) error {
	if len(job) < 1 || len(job) > maxJob {
		return fmt.Errorf("shm transport: job name of %d bytes, want 1 to %d: %w", len(job), maxJob, ftrma.ErrInvalid)
	}
	for _, c := range []byte(job) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("shm transport: job name %q: only [A-Za-z0-9._-] allowed: %w", job, ftrma.ErrInvalid)
		}
	}
	if job == "." || job == ".." {
		return fmt.Errorf("shm transport: job name %q: %w", job, ftrma.ErrInvalid)
	}
	return nil
}

// File names. Every file of a job starts with "ftrma-<job>-<rank>-":
//
//	ftrma-<job>-<rank>-ctl        the rank's control segment
//	ftrma-<job>-<rank>-ctl.tmp    the same while Open initializes it
//	ftrma-<job>-<rank>-seg-<id>   a segment from Alloc; ids count from 1
func ctlName(job string, r ftrma.Rank) string {
	return "ftrma-" + job + "-" + strconv.Itoa(int(r)) + "-ctl"
}

func segName(job string, r ftrma.Rank, id uint64) string {
	return "ftrma-" + job + "-" + strconv.Itoa(int(r)) + "-seg-" + strconv.FormatUint(id, 10)
}

func bellName(job string, r ftrma.Rank) string {
	return "ftrma-" + job + "-" + strconv.Itoa(int(r)) + "-bell"
}

const tmpSuffix = ".tmp"

// jobFileRank returns the rank a file of job belongs to, if name is one of
// job's files: "ftrma-<job>-", a rank, then "-ctl", "-ctl.tmp", "-bell" or
// "-seg-<id>". The strict parse keeps job "a" from matching the files of
// job "a-1".
func jobFileRank(name, job string) (ftrma.Rank, bool) {
	rest, ok := strings.CutPrefix(name, "ftrma-"+job+"-")
	if !ok {
		return 0, false
	}
	rank, kind, ok := strings.Cut(rest, "-")
	if !ok || !isDigits(rank) {
		return 0, false
	}
	r, err := strconv.ParseInt(rank, 10, 32)
	if err != nil {
		return 0, false
	}
	if kind != "ctl" && kind != "ctl"+tmpSuffix && kind != "bell" {
		id, ok := strings.CutPrefix(kind, "seg-")
		if !ok || !isDigits(id) {
			return 0, false
		}
	}
	return ftrma.Rank(r), true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// RemoveJob removes every file of job from dir (JobDir("", job) when empty,
// and then that directory too if nothing else is left in it): the
// control and data segments of all its ranks, including those that were
// killed before they could close. The launcher calls it when the job ends.
// Processes that still map a removed file keep their mapping; the memory is
// freed when the last one unmaps it. A missing dir is not an error.
//
// Only the launcher, once every rank of the job has ended, may remove all
// of it: a rank maps a peer's segment from its file when it first reaches
// it, and forgets segments whose files are gone, so removing the files of
// live ranks makes their peers' accesses fail with ftrma.ErrUnknownRegion.
// Who knows only some ranks to be gone (an agent whose ranks were killed,
// while hosts that share dir go on) uses RemoveRanks.
func RemoveJob(dir, job string) error {
	err := removeFiles(dir, job, func(ftrma.Rank) bool { return true })
	if dir == "" && err == nil {
		os.Remove(JobDir("", job)) // not empty: the launcher's owner files are there still
	}
	return err
}

// RemoveRanks removes the files of job's ranks in ranks from dir
// (JobDir("", job) when empty), as RemoveJob does for all of them, and leaves
// those of the job's other ranks: they may be alive, on this host or on
// another that shares dir (hosts emulated by network namespaces on one
// machine, containers sharing /dev/shm), and their peers reach their memory
// through these files. A missing dir is not an error.
func RemoveRanks(dir, job string, ranks []ftrma.Rank) error {
	return removeFiles(dir, job, func(r ftrma.Rank) bool { return slices.Contains(ranks, r) })
}

// removeFiles removes the files of job in dir whose rank mine accepts.
func removeFiles(dir, job string, mine func(ftrma.Rank) bool) error {
	if err := checkJob(job); err != nil {
		return err
	}
	if dir == "" {
		dir = JobDir("", job)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("shm transport: remove job %s: %w", job, err)
	}
	var errs []error
	for _, e := range ents {
		if r, ok := jobFileRank(e.Name(), job); !ok || !mine(r) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("shm transport: remove job %s: %w", job, errors.Join(errs...))
	}
	return nil
}
