package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ftrma/ftrma/internal/result"
)

// The ftrma side: every run is a fresh job
//
//	ftrun --timeout T -n N <ftkv> bench --copies K --size S --ops M -json
//
// whose standard output carries the results (see parseFtkvOutput). It is
// built from ./cmd/ftkv unless -ftkv names another binary or package
// directory (-ftkv "" leaves ftrma out).

// ftrmaNotBuilt is the plain statement printed when -ftkv is "".
const ftrmaNotBuilt = sysFtrma + ": not measured (-ftkv \"\")"

type ftrmaSystem struct {
	name      string // sysFtrma or sysFtrmaSHM
	ftrun     string
	ftkv      string
	ranks     int      // N
	ftrunArgs []string // extra ftrun flags
	ftkvArgs  []string // extra ftkv bench flags
	notes     []string
}

// setupFtrma builds cmd/ftrun, and ftkv when given as a package directory.
func setupFtrma(ctx context.Context, name, goBin, root, dir, ftkv string, ranks int, wl workload, ftrunArgs, ftkvArgs []string) (*ftrmaSystem, error) {
	s := &ftrmaSystem{name: name, ranks: ranks, ftrunArgs: ftrunArgs, ftkvArgs: ftkvArgs}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s.ftrun = filepath.Join(dir, "ftrun")
	if err := goBuild(ctx, goBin, root, s.ftrun, "./cmd/ftrun"); err != nil {
		return nil, err
	}
	st, err := os.Stat(ftkv)
	if err != nil && !filepath.IsAbs(ftkv) {
		if st, err = os.Stat(filepath.Join(root, ftkv)); err == nil {
			ftkv = filepath.Join(root, ftkv)
		}
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("-ftkv %s: %w", ftkv, err)
	case st.IsDir():
		s.ftkv = filepath.Join(dir, "ftkv")
		pkg := ftkv
		if !filepath.IsAbs(pkg) && !strings.HasPrefix(pkg, ".") {
			pkg = "./" + pkg
		}
		if err := goBuild(ctx, goBin, root, s.ftkv, pkg); err != nil {
			return nil, err
		}
		s.notes = append(s.notes, fmt.Sprintf("ftkv built from %s", ftkv))
	default:
		s.ftkv, err = filepath.Abs(ftkv)
		if err != nil {
			return nil, err
		}
	}
	s.notes = append(s.notes, fmt.Sprintf("ftrma over %s: every run is a fresh job of %d ranks, the writers spread over them round robin (each rank is an application process embedding the store): %s",
		map[string]string{"tcp": "TCP", "shm": "shared memory"}[ftrmaTransport(name)], ranks, strings.Join(s.argv(0, 0, 0, wl, time.Minute), " ")))
	return s, nil
}

func goBuild(ctx context.Context, goBin, root, out, pkg string) error {
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, tailString(b, 15))
	}
	return nil
}

// argv is one run's command line (copies, size and ops 0 render as K, S, M);
// the writers, their keys, warm-up puts and gets are the workload's.
func (s *ftrmaSystem) argv(copies, size, ops int, wl workload, timeout time.Duration) []string {
	num := func(n int, sym string) string {
		if n == 0 {
			return sym
		}
		return strconv.Itoa(n)
	}
	a := []string{s.ftrun, "--timeout", timeout.String(), "--transport", ftrmaTransport(s.name), "--oversubscribe"}
	a = append(a, s.ftrunArgs...)
	a = append(a, "-n", strconv.Itoa(s.ranks), s.ftkv, "bench",
		"--copies", num(copies, "K"), "--size", num(size, "S"), "--ops", num(ops, "M"), "-json",
		"--writers", strconv.Itoa(wl.Writers), "--keys", strconv.Itoa(wl.KeysPerWriter),
		"--warmup", strconv.Itoa(wl.Warmup), "--gets", strconv.Itoa(wl.Gets))
	return append(a, s.ftkvArgs...)
}

func (s *ftrmaSystem) Name() string { return s.name }

func (s *ftrmaSystem) Supports(copies int) string {
	if copies > s.ranks {
		return fmt.Sprintf("%d copies need at least %d ranks (-ftkv-n %d)", copies, copies, s.ranks)
	}
	return ""
}

func (s *ftrmaSystem) Prepare(ctx context.Context, copies int, p plan) error { return nil }
func (s *ftrmaSystem) Warm(ctx context.Context, copies int, p plan) error    { return nil }
func (s *ftrmaSystem) Done(copies int)                                       {}
func (s *ftrmaSystem) Notes() []string                                       { return s.notes }
func (s *ftrmaSystem) Close()                                                {}

func (s *ftrmaSystem) Run(ctx context.Context, copies, size int, p plan) ([]result.Result, error) {
	wl := p.workload(size)
	argv := s.argv(copies, size, wl.Puts, wl, p.runTimeout)
	out, err := runJob(ctx, p.runTimeout+15*time.Second, argv)
	if err != nil {
		return nil, err
	}
	return parseFtkvOutput(out, s.name, size, copies)
}

// runJob runs an ftrun job within timeout, its process group killed when
// it runs out, and returns its standard output; its error says the command
// and the last lines it printed.
func runJob(ctx context.Context, timeout time.Duration, argv []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	setProcAttr(cmd)
	cmd.Cancel = func() error { signalGroup(cmd, true); return nil }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err,
			tailString(append(stderr.Bytes(), stdout.Bytes()...), 10))
	}
	return stdout.Bytes(), nil
}

// parseFtkvOutput reads the results of one ftkv bench job from its standard
// output. It accepts either form, on any line, after any prefix such as
// ftrun's "[0] " tag:
//
//   - a JSON array of result records on one line, as bench/internal/result
//     writes them: [{"bench":"put_p50","size":64,"copies":3,"value":41.2,"unit":"us"}, ...]
//     ("system" may be left out; "size" and "copies", when present, must be
//     those of the run);
//   - result lines: RESULT put_p50 64 41.2 us copies=3
//
// Benchmarks other than put_p50, put_p99 and get_p50 are ignored (ftkv also
// reports p999 and throughput). Values in ns, ms or s are converted to us.
// Every one of the three must be present.
func parseFtkvOutput(out []byte, system string, size, copies int) ([]result.Result, error) {
	got := make(map[string]result.Result)
	add := func(r result.Result) error {
		if r.Size != 0 && r.Size != size {
			return fmt.Errorf("ftkv reported %s for size %d, the run was size %d", r.Bench, r.Size, size)
		}
		if r.Copies != 0 && r.Copies != copies {
			return fmt.Errorf("ftkv reported %s for copies %d, the run was copies %d", r.Bench, r.Copies, copies)
		}
		if !isBench(r.Bench) {
			return nil
		}
		v, err := toMicros(r.Value, r.Unit)
		if err != nil {
			return fmt.Errorf("ftkv %s: %w", r.Bench, err)
		}
		got[r.Bench] = result.Result{Bench: r.Bench, Size: size, Copies: copies, System: system, Value: v, Unit: "us"}
		return nil
	}
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "[{"); i >= 0 {
			var rs []result.Result
			if err := json.Unmarshal([]byte(strings.TrimSpace(line[i:])), &rs); err != nil {
				return nil, fmt.Errorf("ftkv JSON: %w", err)
			}
			for _, r := range rs {
				if err := add(r); err != nil {
					return nil, err
				}
			}
			continue
		}
		r, ok, err := result.ParseLine(line)
		if err != nil {
			return nil, err
		}
		if ok {
			if err := add(r); err != nil {
				return nil, err
			}
		}
	}
	var rs []result.Result
	var missing []string
	for _, b := range benchOrder {
		if r, ok := got[b]; ok {
			rs = append(rs, r)
		} else {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return rs, fmt.Errorf("ftkv output lacks %s", strings.Join(missing, ", "))
	}
	return rs, nil
}

func isBench(b string) bool {
	for _, x := range benchOrder {
		if x == b {
			return true
		}
	}
	return false
}

// toMicros converts v in unit to microseconds.
func toMicros(v float64, unit string) (float64, error) {
	switch unit {
	case "us", "µs":
		return v, nil
	case "ns":
		return v / 1e3, nil
	case "ms":
		return v * 1e3, nil
	case "s":
		return v * 1e6, nil
	}
	return 0, errors.New("unknown unit " + strconv.Quote(unit))
}
