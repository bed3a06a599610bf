package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// The multi-host suite: four hosts h1..h4 as network namespaces with
// hostnames of their own (scripts/cluster.sh), a real sshd on each and a
// real Slurm (slurmctld on host ctl, a slurmd per host, munge). ftrun runs
// in the root namespace, which reaches every host over a bridge, and starts
// its agents itself: by ssh with a hostfile, by srun inside salloc.
//
// FTRMA_CLUSTER=0 skips it; where the machine cannot build the cluster (not
// root, no namespaces, packages not installable) every test says NOT RUN
// and is skipped, never passed. Each test of the suite says "multi-host
// suite" in its output, run or skipped: scripts/test.sh counts the suite's
// tests by it, and fails when the suite did not run on a machine that can
// run it.

var cluster struct {
	once sync.Once
	dir  string
	err  error // why the cluster is not there
	skip bool  // err is a NOT RUN, not a failure
}

const clusterHosts = 4

func clusterScript() string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "scripts", "cluster.sh")
}

// needCluster brings the cluster up once per run and returns its directory.
func needCluster(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("NOT RUN: multi-host suite: -short mode")
	}
	if os.Getenv("FTRMA_CLUSTER") == "0" {
		t.Skip("NOT RUN: multi-host suite: FTRMA_CLUSTER=0")
	}
	cluster.once.Do(func() {
		if os.Geteuid() != 0 {
			cluster.err, cluster.skip = errors.New("needs root (network namespaces, sshd, Slurm)"), true
			return
		}
		dir, err := os.MkdirTemp("", "ftrma-cluster-")
		if err != nil {
			cluster.err = err
			return
		}
		os.Chmod(dir, 0o755)
		cmd := exec.Command(clusterScript(), "up", dir, strconv.Itoa(clusterHosts), "--ssh", "--slurm")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.ExitCode() == 77:
			cluster.err, cluster.skip = fmt.Errorf("%s", bytes.TrimSpace(out)), true
			os.RemoveAll(dir)
		case err != nil:
			cluster.err = fmt.Errorf("cluster.sh up: %v\n%s", err, out)
			exec.Command(clusterScript(), "down", dir).Run()
			os.RemoveAll(dir)
		default:
			cluster.dir = dir
		}
	})
	if cluster.skip {
		t.Skipf("NOT RUN: multi-host suite: %v", cluster.err)
	}
	if cluster.err != nil {
		t.Fatalf("multi-host suite: %v", cluster.err)
	}
	t.Logf("multi-host suite: on the cluster of %s", cluster.dir)
	return cluster.dir
}

// clusterDown takes the cluster down at the end of the run.
func clusterDown() {
	if cluster.dir != "" {
		if out, err := exec.Command(clusterScript(), "down", cluster.dir).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "cluster.sh down: %v\n%s", err, out)
		}
		os.RemoveAll(cluster.dir)
	}
}

// cutHost cuts host's link (scripts/cluster.sh cut) and returns what heals
// it, once, however often it is called.
func cutHost(t *testing.T, dir, host string) (heal func()) {
	t.Helper()
	if o, err := exec.Command(clusterScript(), "cut", dir, host).CombinedOutput(); err != nil {
		t.Fatalf("cut %s: %v\n%s", host, err, o)
	}
	var once sync.Once
	return func() { once.Do(func() { exec.Command(clusterScript(), "heal", dir, host).Run() }) }
}

// hostfile writes a hostfile of the cluster's first hosts hosts with slots
// each.
func hostfile(t *testing.T, hosts, slots int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# the cluster's hosts\n")
	for i := 1; i <= hosts; i++ {
		fmt.Fprintf(&b, "h%d slots=%d\n", i, slots)
	}
	p := filepath.Join(t.TempDir(), "hostfile")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// clusterCmd is ftrun (or what runs it: salloc) as a command in the root
// namespace, with the cluster's ssh configuration and Slurm's.
func clusterCmd(ctx context.Context, t *testing.T, dir string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = bins(t)
	cmd.Env = append(os.Environ(),
		"FTRMA_SSH=ssh -F "+filepath.Join(dir, "ssh_config"),
		"SLURM_CONF="+filepath.Join(dir, "slurm.conf"))
	// A job that does not end gets SIGQUIT first: ftrun (a Go program)
	// then prints where each of its goroutines waits.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

func runCluster(t *testing.T, dir string, timeout time.Duration, name string, args ...string) (string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := clusterCmd(ctx, t, dir, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %v:\n%s", name, args, timeout, out.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out.String(), code, took
}

// The checkpointing example over three hosts, 4 ranks each, started by ssh
// from a hostfile and by srun inside a Slurm allocation, gives the
// failure-free result of a one-host run; ranks 2 and 5 crashing midway
// (hosts h1 and h2) change nothing, under Slurm with --arbiter too.
func TestClusterCheckpoint(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	ftrunBin, prog := filepath.Join(bin, "ftrun"), filepath.Join(bin, "ckpt")
	out, code := ftrun(t, 2*time.Minute, "-n", "12", "--tag-output", prog)
	if code != 0 {
		t.Fatalf("one-host run: exit %d:\n%s", code, out)
	}
	want, _, _ := ckptResult(t, out)
	hf := hostfile(t, 3, 4)
	for _, c := range []struct {
		name string
		cmd  []string
	}{
		{"ssh", []string{ftrunBin, "--hostfile", hf, "-v", "--tag-output", prog}},
		{"ssh, crashes", []string{ftrunBin, "--hostfile", hf, "--tag-output", prog, "-crash", "2@0.25", "-crash", "5@0.5"}},
		{"slurm", []string{"salloc", "-N", "3", "-w", "h[1-3]", "--ntasks-per-node", "4", "--quiet", ftrunBin, "-v", "--tag-output", prog}},
		{"slurm, crashes", []string{"salloc", "-N", "3", "-w", "h[1-3]", "--ntasks-per-node", "4", "--quiet", ftrunBin, "--tag-output", prog, "-crash", "2@0.25", "-crash", "5@0.5"}},
		// The replicated arbiter over agents started by srun: the
		// arbiter's mesh, the agents' leases and exit notices work there
		// too (what it survives inside Slurm: README).
		{"slurm, arbiter, crashes", []string{"salloc", "-N", "3", "-w", "h[1-3]", "--ntasks-per-node", "4", "--quiet", ftrunBin, "--arbiter", "--tag-output", prog, "-crash", "2@0.25", "-crash", "5@0.5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, code, took := runCluster(t, dir, 3*time.Minute, c.cmd[0], c.cmd[1:]...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			got, survivors, _ := ckptResult(t, out)
			wantSurvivors := "12"
			if strings.Contains(c.name, "crashes") {
				wantSurvivors = "10"
			}
			if got != want || survivors != wantSurvivors {
				t.Errorf("%s nodes, %s survivors; want %s, %s:\n%s", got, survivors, want, wantSurvivors, out)
			}
			if strings.Contains(strings.Join(c.cmd, " "), " -v ") {
				for i := 1; i <= 3; i++ {
					line := fmt.Sprintf("ftrun: h%d: ranks [%d %d %d %d] (agent started by %s)", i, 4*i-4, 4*i-3, 4*i-2, 4*i-1, map[bool]string{true: "srun", false: "ssh"}[c.name == "slurm"])
					if !strings.Contains(out, line) {
						t.Errorf("output does not say %q:\n%s", line, out)
					}
				}
				if !strings.Contains(out, "transport shm+tcp") {
					t.Errorf("output does not name the per-peer transport:\n%s", out)
				}
			}
			if strings.Contains(c.name, "arbiter") && (!strings.Contains(out, "ftrun: arbiter: node 1 leads") || strings.Contains(out, "the arbiter does not run")) {
				t.Errorf("the arbiter did not run:\n%s", out)
			}
			t.Logf("%s: %v", c.name, took.Round(time.Millisecond))
		})
	}
}

// A whole host lost: every process on h2 killed, or h2's link cut while
// its processes run. Every survivor learns of all four of h2's ranks, ftrun
// reports them failed together and exits with the survivors' status; with
// the link cut, h2's agent kills its ranks (no second world goes on).
func TestClusterHostLoss(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	hf := hostfile(t, 3, 4)
	for _, how := range []string{"killhost", "cut"} {
		t.Run(how, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), "--hostfile", hf, "--tag-output", filepath.Join(bin, "testprog"), "watchfail", "8s")
			job := startLive(t, cmd)
			job.waitReady(t, 12)
			time.Sleep(500 * time.Millisecond)
			lost := time.Now()
			if o, err := exec.Command(clusterScript(), how, dir, "h2").CombinedOutput(); err != nil {
				t.Fatalf("cluster.sh %s h2: %v\n%s", how, err, o)
			}
			undo := map[string]string{"cut": "heal", "killhost": "revive"}[how]
			defer exec.Command(clusterScript(), undo, dir, "h2").Run()
			outText, errText := job.finish()
			if ctx.Err() != nil {
				t.Fatalf("ftrun did not end:\n%s\n%s", outText, errText)
			}
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit %d, want 0 (every survivor exited 0):\n%s\n%s", code, outText, errText)
			}
			// Each survivor's time to know all of h2's ranks (4..7).
			learned := map[int]map[int]time.Time{}
			re := regexp.MustCompile(`^\[(\d+)\] learned (\d+) (\d+)$`)
			for _, l := range strings.Split(outText, "\n") {
				if m := re.FindStringSubmatch(l); m != nil {
					r, _ := strconv.Atoi(m[1])
					f, _ := strconv.Atoi(m[2])
					ns, _ := strconv.ParseInt(m[3], 10, 64)
					if learned[r] == nil {
						learned[r] = map[int]time.Time{}
					}
					learned[r][f] = time.Unix(0, ns)
				}
			}
			var all []time.Duration
			for r := range 12 {
				if r >= 4 && r < 8 {
					continue
				}
				var last time.Time
				for f := 4; f < 8; f++ {
					at, ok := learned[r][f]
					if !ok {
						t.Errorf("rank %d never learned of rank %d's failure", r, f)
						continue
					}
					if at.After(last) {
						last = at
					}
				}
				if !last.IsZero() {
					all = append(all, last.Sub(lost))
				}
				for f := range learned[r] {
					if f < 4 || f >= 8 {
						t.Errorf("rank %d was told of rank %d's failure, which is on a live host", r, f)
					}
				}
			}
			if len(all) > 0 {
				slices.Sort(all)
				t.Logf("%s h2: survivors knew all 4 of its ranks after p50 %v, max %v (n=%d)", how, all[len(all)/2].Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond), len(all))
			}
			for r := 4; r < 8; r++ {
				if !regexp.MustCompile(fmt.Sprintf(`rank %d failed at [0-9.]+s: was lost`, r)).MatchString(errText) {
					t.Errorf("ftrun does not report rank %d lost:\n%s", r, errText)
				}
			}
			if how == "cut" {
				// h2's agent, cut off from ftrun, killed its ranks.
				time.Sleep(3 * time.Second)
				o, _ := exec.Command(clusterScript(), "on", dir, "h2", "sh", "-c", "pgrep -f '[t]estprog watchfail' || true").CombinedOutput()
				if s := strings.TrimSpace(string(o)); s != "" {
					t.Errorf("ranks still run on the cut-off host h2: pids %s", s)
				}
			}
		})
	}
}

// One world, never two. h2's link is cut while its ranks run: h2's ranks
// cannot renew their lease from ftrun and stop by themselves; the others
// hear of their failure only after every one of them has stopped, go on,
// and end with status 0. After the heal nothing of h2 comes back.
func TestClusterPartition(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	hf := hostfile(t, 3, 4)
	stops := t.TempDir()
	os.Chmod(stops, 0o777)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), "--hostfile", hf, "--tag-output", filepath.Join(bin, "testprog"), "watchfail", "8s", stops)
	job := startLive(t, cmd)
	job.waitReady(t, 12)
	time.Sleep(500 * time.Millisecond)
	cut := time.Now()
	heal := cutHost(t, dir, "h2")
	defer heal()
	outText, errText := job.finish()
	if ctx.Err() != nil {
		t.Fatalf("ftrun did not end:\n%s\n%s", outText, errText)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d, want 0:\n%s\n%s", code, outText, errText)
	}
	// When each of h2's ranks stopped.
	stopped := map[int]time.Time{}
	for r := 4; r < 8; r++ {
		b, err := os.ReadFile(filepath.Join(stops, fmt.Sprintf("stopped-%d", r)))
		if err != nil {
			t.Errorf("rank %d on the cut host did not stop on losing its lease: %v", r, err)
			continue
		}
		ns, _ := strconv.ParseInt(string(b), 10, 64)
		stopped[r] = time.Unix(0, ns)
	}
	// When each survivor learned of them: never before they stopped.
	re := regexp.MustCompile(`^\[(\d+)\] learned (\d+) (\d+)$`)
	var took []time.Duration
	for _, l := range strings.Split(outText, "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		by, _ := strconv.Atoi(m[1])
		f, _ := strconv.Atoi(m[2])
		ns, _ := strconv.ParseInt(m[3], 10, 64)
		at := time.Unix(0, ns)
		if f < 4 || f >= 8 {
			t.Errorf("rank %d was told of rank %d's failure, which is on a live host", by, f)
			continue
		}
		if st, ok := stopped[f]; ok && !at.After(st) {
			t.Errorf("rank %d learned of rank %d's failure %v before rank %d stopped: two worlds", by, f, st.Sub(at), f)
		}
		took = append(took, at.Sub(cut))
	}
	if len(took) != 8*4 {
		t.Errorf("%d notices of h2's ranks reached the 8 survivors, want 32:\n%s", len(took), outText)
	}
	var stopTook []time.Duration
	for _, st := range stopped {
		stopTook = append(stopTook, st.Sub(cut))
	}
	slices.Sort(took)
	slices.Sort(stopTook)
	if len(took) > 0 && len(stopTook) > 0 {
		t.Logf("cut h2: its ranks stopped after %v..%v; the survivors took over after %v..%v (p50 %v)",
			stopTook[0].Round(time.Millisecond), stopTook[len(stopTook)-1].Round(time.Millisecond),
			took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond))
	}
	// After the heal, nothing of h2's job comes back.
	heal()
	time.Sleep(2 * time.Second)
	if o, _ := exec.Command(clusterScript(), "on", dir, "h2", "sh", "-c", "pgrep -f '[t]estprog watchfail' || true").CombinedOutput(); strings.TrimSpace(string(o)) != "" {
		t.Errorf("ranks of the cut host still run after the heal: %s", o)
	}
}

// TestRoutesByHost runs four ranks on two hosts, two on each: every rank
// reaches the ranks of its own host through shared memory and the others
// through the network, and counters, puts and gets verify over both paths;
// every rank, started by ftrun or an agent, gets ftrun's -x variable.
// The hosts are the cluster's (network namespaces: TCP between them), or
// with FTRMA_E2E_HOSTS the verbs suite's two Soft-RoCE guests (verbs between
// them, and every atomic through the device: transport/multi).
func TestRoutesByHost(t *testing.T) {
	bin := bins(t)
	prog := filepath.Join(bin, "testprog")
	var out string
	var code int
	network := "tcp"
	if multiHost() {
		network = "verbs"
		out, code = ftrun(t, 5*time.Minute, "-n", "4", "-v", "-x", "ROUTES_TAG=exported", "--tag-output", prog, "routes")
	} else {
		dir := needCluster(t)
		out, code, _ = runCluster(t, dir, 2*time.Minute, filepath.Join(bin, "ftrun"), "--hostfile", hostfile(t, 2, 2), "-v", "-x", "ROUTES_TAG=exported", "--tag-output", prog, "routes")
	}
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	re := regexp.MustCompile(`(?m)^\[(\d+)\] routes host=(\S+) (\S+)$`)
	hostOf := map[int]string{}
	routes := map[int][]string{}
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.Atoi(m[1])
		hostOf[r], routes[r] = m[2], strings.Split(m[3], ",")
	}
	if len(hostOf) != 4 {
		t.Fatalf("%d ranks said their routes, want 4:\n%s", len(hostOf), out)
	}
	perHost := map[string]int{}
	for _, h := range hostOf {
		perHost[h]++
	}
	if len(perHost) != 2 || perHost[hostOf[0]] != 2 {
		t.Fatalf("ranks by host %v, want two on each of two hosts:\n%s", perHost, out)
	}
	for r, names := range routes {
		if len(names) != 4 {
			t.Fatalf("rank %d names %d routes:\n%s", r, len(names), out)
		}
		for q, name := range names {
			want := network
			if hostOf[q] == hostOf[r] {
				want = "shm"
			}
			if name != want {
				t.Errorf("rank %d (on %s) reaches rank %d (on %s) through %q, want %q", r, hostOf[r], q, hostOf[q], name, want)
			}
		}
	}
	for r := range 4 { // -x reaches the ranks the agents started (over ssh in the cluster)
		if want := fmt.Sprintf("[%d] env ROUTES_TAG=\"exported\"\n", r); !strings.Contains(out, want) {
			t.Errorf("rank %d did not get -x ROUTES_TAG: no %q in\n%s", r, want, out)
		}
	}
	if !strings.Contains(out, "[0] routes verified") {
		t.Errorf("no verified result:\n%s", out)
	}
	if want := "transport shm+" + network; !strings.Contains(out, want) {
		t.Errorf("ftrun does not say %q:\n%s", want, out)
	}
}

// Snapshots while a host is cut off: six ranks on h1..h3 (two each, Copies
// 2 with the replicas on distinct hosts) snapshot their store over and
// over; h2's link is cut while they do. The snapshot under way waits for
// h2's ranks to be declared failed (they stop on losing their lease), then
// completes over the four survivors, and the later ones too — each holding
// all 240 keys, h2's from their replicas elsewhere; no rank reports an
// error. A job of two ranks on one host restores the newest and reads
// every key back.
func TestClusterSnapshotHostCut(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	hf := hostfile(t, 3, 2)
	snaps := t.TempDir()
	os.Chmod(snaps, 0o777)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), "--hostfile", hf, "--tag-output",
		filepath.Join(bin, "testprog"), "snapcut", snaps, "14s")
	job := startLive(t, cmd)
	job.waitReady(t, 6)
	snapRE := regexp.MustCompile(`^\[0\] snapshot (\d+) (\d+)$`)
	for !snapRE.MatchString(job.sc.Text()) {
		if !job.sc.Scan() {
			t.Fatalf("the job ended before a snapshot:\n%s\n%s", job.out.String(), job.errs.String())
		}
		job.out.WriteString(job.sc.Text() + "\n")
	}
	cutAt := time.Now().UnixNano()
	heal := cutHost(t, dir, "h2")
	defer heal()
	outText, errText := job.finish()
	if ctx.Err() != nil {
		t.Fatalf("ftrun did not end:\n%s\n%s", outText, errText)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d, want 0:\n%s\n%s", code, outText, errText)
	}
	after := 0
	for _, l := range strings.Split(outText, "\n") {
		if strings.Contains(l, "snapshot error") {
			t.Errorf("a snapshot failed: %s", l)
		}
		m := regexp.MustCompile(`^\[(\d+)\] snapshot (\d+) (\d+)$`).FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if m[3] != "240" {
			t.Errorf("a snapshot without every key: %s", l)
		}
		if cut, _ := strconv.ParseInt(m[2], 10, 64); cut > cutAt && m[1] == "0" {
			after++
		}
	}
	for _, r := range []string{"0", "1", "4", "5"} {
		if !strings.Contains(outText, "["+r+"] done") {
			t.Errorf("survivor %s did not finish:\n%s", r, outText)
		}
	}
	if after == 0 {
		t.Fatalf("no snapshot completed after the cut:\n%s\n%s", outText, errText)
	}
	heal()
	out, code := ftrun(t, time.Minute, "-n", "2", filepath.Join(bin, "testprog"), "snaprestore", snaps, "6")
	if code != 0 || !strings.Contains(out, "restored 240 keys from ") {
		t.Fatalf("restore: exit %d:\n%s", code, out)
	}
	t.Logf("%d snapshots by rank 0 after the cut; %s", after, strings.TrimSpace(out))
}
