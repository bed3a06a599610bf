package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ftrun's injected failures beside --kill (--pause, --kill-host, --cut) on
// the checkpointing example: whatever they do to a rank or a host, the
// survivors end with the failure-free result. The one-host tests run
// anywhere; the TestClusterInject ones over scripts/cluster.sh's hosts
// (needCluster), four hosts of two ranks each: h1 ranks 0-1, h2 2-3, h3
// 4-5, h4 6-7.

var ckptWant = map[string]*struct {
	want string
	took time.Duration
}{}

// ckptFailureFree runs the checkpointing example with args on this host,
// 8 ranks, once per args, and returns its result and how long it took.
func ckptFailureFree(t *testing.T, args ...string) (string, time.Duration) {
	t.Helper()
	key := strings.Join(args, " ")
	if w := ckptWant[key]; w != nil {
		return w.want, w.took
	}
	prog := filepath.Join(bins(t), "ckpt") // built before the clock starts
	start := time.Now()
	out, code := ftrun(t, 2*time.Minute, append([]string{"-n", "8", "--tag-output", prog}, args...)...)
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("failure-free run: exit %d:\n%s", code, out)
	}
	want, _, _ := ckptResult(t, out)
	ckptWant[key] = &struct {
		want string
		took time.Duration
	}{want, took}
	return want, took
}

// failedSet is the ranks of ftrun's last line "N rank(s) failed: ...",
// sorted.
func failedSet(out string) []string {
	m := ftrunFailedRE.FindStringSubmatch(out)
	if m == nil {
		return nil
	}
	var ranks []string
	for _, f := range regexp.MustCompile(`(\d+) \(at [\d.]+s\)`).FindAllStringSubmatch(m[2], -1) {
		ranks = append(ranks, f[1])
	}
	slices.Sort(ranks)
	return ranks
}

// --pause on this host: a rank stopped for longer than ftrun waits for an
// answer to its probe (half a lease term: 1 s times the ranks per CPU)
// after the detector's suspicion is declared failed, killed and adopted; one
// stopped well within the detector's timeout (60 ms times the ranks per
// CPU) fails nobody. Both end with the failure-free result.
func TestInjectPause(t *testing.T) {
	want, d := ckptFailureFree(t)
	prog := filepath.Join(bins(t), "ckpt")
	// Mid-run, as TestCkptSameResultUnderKills's kills.
	at := (d * 30 / 100).Round(time.Millisecond)
	perCPU := (8 + runtime.NumCPU() - 1) / runtime.NumCPU()
	long := time.Duration(perCPU)*time.Second + 2*time.Second
	t.Run("long", func(t *testing.T) {
		spec := fmt.Sprintf("2@%v:%v", at, long)
		out, code := ftrun(t, 2*time.Minute, "-n", "8", "--tag-output", "--pause", spec, prog)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		got, survivors, adopted := ckptResult(t, out)
		if got != want || survivors != "7" || adopted != "2" {
			t.Errorf("%s nodes, %s survivors, adopted [%s]; want %s, 7, [2]", got, survivors, adopted, want)
		}
		for _, re := range []string{
			`(?m)^ftrun: paused rank 2 for ` + regexp.QuoteMeta(long.String()) + ` \(--pause ` + regexp.QuoteMeta(spec) + `\): SIGSTOP now$`,
			`(?m)^ftrun: rank 2 was declared failed by rank \d+'s detector at [\d.]+s: killing it$`,
			`(?m)^ftrun: rank 2 failed at [\d.]+s: was killed by signal 9 \(killed\)$`,
		} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("no line matching %q", re)
			}
		}
		if f := failedSet(out); !slices.Equal(f, []string{"2"}) {
			t.Errorf("ftrun reports ranks %v failed, want [2]", f)
		}
		if strings.Contains(out, "resumed rank 2") {
			t.Error("rank 2 was resumed: it should have been reaped while stopped")
		}
		if t.Failed() {
			t.Logf("output:\n%s", out)
		}
	})
	t.Run("short", func(t *testing.T) {
		spec := fmt.Sprintf("2@%v:20ms", at)
		out, code := ftrun(t, 2*time.Minute, "-n", "8", "--tag-output", "--pause", spec, prog)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		got, survivors, adopted := ckptResult(t, out)
		if got != want || survivors != "8" || adopted != "" {
			t.Errorf("%s nodes, %s survivors, adopted [%s]; want %s, 8, []", got, survivors, adopted, want)
		}
		for _, l := range []string{"ftrun: paused rank 2 for 20ms (--pause " + spec + "): SIGSTOP now\n", "ftrun: resumed rank 2 (--pause " + spec + "): SIGCONT\n"} {
			if !strings.Contains(out, l) {
				t.Errorf("no line %q", l)
			}
		}
		if f := failedSet(out); f != nil || strings.Contains(out, "declared failed") {
			t.Errorf("ranks %v failed", f)
		}
		if t.Failed() {
			t.Logf("output:\n%s", out)
		}
	})
}

// blackholes lists the blackhole routes of namespace ns ("" for the root's)
// to the cluster's addresses.
func blackholes(t *testing.T, ns string) []string {
	args := []string{"route", "show", "type", "blackhole"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	o, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Errorf("ip %v: %v\n%s", args, err, o)
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(o), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "198.18.60.") {
			out = append(out, f[1])
		}
	}
	return out
}

// noBlackholesLeft checks that no host of the cluster, nor the root
// namespace where ftrun ran, keeps a blackhole route: ftrun removes its
// own before it exits, the agents theirs as they end (within a few
// seconds of ftrun).
func noBlackholesLeft(t *testing.T) {
	t.Helper()
	if r := blackholes(t, ""); len(r) > 0 {
		t.Errorf("ftrun exited and left blackhole routes in the root namespace: %v", r)
		for _, a := range r {
			exec.Command("ip", "route", "del", "blackhole", a).Run()
		}
	}
	for i := 1; i <= clusterHosts; i++ {
		ns := fmt.Sprintf("ftc-h%d", i)
		var r []string
		for end := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if r = blackholes(t, ns); len(r) == 0 || time.Now().After(end) {
				break
			}
		}
		if len(r) > 0 {
			t.Errorf("h%d keeps blackhole routes after the job: %v", i, r)
			for _, a := range r {
				exec.Command("ip", "-n", ns, "route", "del", "blackhole", a).Run()
			}
		}
	}
}

// procsOn lists the processes of host's UTS namespace whose command line
// contains pattern (the hosts share the root's PID namespace, so a bare
// pgrep sees every host's processes).
func procsOn(t *testing.T, dir, host, pattern string) []string {
	t.Helper()
	holder, err := exec.Command(clusterScript(), "pid", dir, host).Output()
	if err != nil {
		t.Fatalf("cluster.sh pid %s: %v", host, err)
	}
	uts, err := os.Readlink("/proc/" + strings.TrimSpace(string(holder)) + "/ns/uts")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := exec.Command("pgrep", "-f", pattern).Output()
	var pids []string
	for _, pid := range strings.Fields(string(o)) {
		if u, err := os.Readlink("/proc/" + pid + "/ns/uts"); err == nil && u == uts {
			pids = append(pids, pid)
		}
	}
	return pids
}

// --kill-host h2: its agent and both of its ranks are SIGKILLed mid-run;
// ftrun reports ranks 2 and 3 lost with their host, the survivors adopt
// their lists and end with the failure-free result, ftrun exits 0. The job
// runs 16,384 tasks (about 5 s here): with the default 4,096 a rank may
// have checkpointed its whole list by 1 s, and then nobody adopts it (a
// CI run ended with adopted ranks [3] so).
func TestClusterInjectKillHost(t *testing.T) {
	dir := needCluster(t)
	want, _ := ckptFailureFree(t, "-tasks", "16384")
	bin := bins(t)
	out, code, took := runCluster(t, dir, 3*time.Minute, filepath.Join(bin, "ftrun"), "--hostfile", hostfile(t, 4, 2), "--tag-output",
		"--kill-host", "h2@1s", filepath.Join(bin, "ckpt"), "-tasks", "16384")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	got, survivors, adopted := ckptResult(t, out)
	if got != want || survivors != "6" || adopted != "2 3" {
		t.Errorf("%s nodes, %s survivors, adopted [%s]; want %s, 6, [2 3]", got, survivors, adopted, want)
	}
	if !strings.Contains(out, "ftrun: killing host h2 (--kill-host h2@1s): its agent SIGKILLs its ranks [2 3] and itself\n") {
		t.Error("ftrun does not say it killed h2")
	}
	for _, r := range []string{"2", "3"} {
		if !regexp.MustCompile(`(?m)^ftrun: rank ` + r + ` failed at [\d.]+s: was lost: `).MatchString(out) {
			t.Errorf("rank %s is not reported lost", r)
		}
	}
	if f := failedSet(out); !slices.Equal(f, []string{"2", "3"}) {
		t.Errorf("ftrun reports ranks %v failed, want [2 3]", f)
	}
	if p := procsOn(t, dir, "h2", "ftrun agent"); len(p) > 0 {
		t.Errorf("an agent still runs on h2: pids %v", p)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
	t.Logf("--kill-host h2@1s: %v", took.Round(time.Millisecond))
}

// --cut h3: h3 is cut off from ftrun and every other host, both ways, by
// blackhole routes on every side (seen while the job runs: at ftrun's, to
// h3; on h1, to h3; on h3, to ftrun's address). h3's ranks stop, the
// others adopt their lists and end with the failure-free result, ftrun
// exits 0, and no route is left anywhere afterwards. The job runs 16,384
// tasks (about 10 s here), so that the heal lands well before its end.
// Without a heal the routes at ftrun's are still there when a survivor
// adopts h3's ranks; with one (3 s: past the links' 2 s timeout, so that
// both ends have given h3 up before) they are gone, at ftrun's and on h1,
// when the job prints its result.
func TestClusterInjectCut(t *testing.T) {
	dir := needCluster(t)
	want, _ := ckptFailureFree(t, "-tasks", "16384")
	bin := bins(t)
	hf := hostfile(t, 4, 2)
	t.Cleanup(func() { noBlackholesLeft(t) })
	for _, c := range []struct {
		spec string
		heal bool
	}{{"h3@1s", false}, {"h3@1s:3s", true}} {
		t.Run(c.spec, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), "--hostfile", hf, "--tag-output", "--cut", c.spec, filepath.Join(bin, "ckpt"), "-tasks", "16384")
			var errs strings.Builder
			cmd.Stderr = &errs
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			// Which routes each side had while the job ran.
			seen := map[string]bool{}
			var mu sync.Mutex
			stop := make(chan struct{})
			polled := make(chan struct{})
			go func() {
				defer close(polled)
				for {
					for _, side := range []struct{ name, ns string }{{"root", ""}, {"h1", "ftc-h1"}, {"h3", "ftc-h3"}} {
						for _, a := range blackholes(t, side.ns) {
							mu.Lock()
							seen[side.name+" "+a] = true
							mu.Unlock()
						}
					}
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}()
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			var atAdoption, atResult []string
			adoptsH3 := regexp.MustCompile(`adopts rank [45]\b`)
			adopted, result := false, false
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				out.WriteString(sc.Text() + "\n")
				switch {
				case !adopted && adoptsH3.MatchString(sc.Text()):
					adopted = true
					atAdoption = blackholes(t, "")
				case !result && strings.Contains(sc.Text(), "] result: "):
					result = true
					atResult = append(blackholes(t, ""), blackholes(t, "ftc-h1")...)
				}
			}
			cmd.Wait()
			took := time.Since(start)
			close(stop)
			<-polled
			all := out.String() + errs.String()
			if ctx.Err() != nil {
				t.Fatalf("ftrun did not end:\n%s", all)
			}
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("exit %d:\n%s", code, all)
			}
			got, survivors, ad := ckptResult(t, out.String())
			if got != want || survivors != "6" || ad != "4 5" {
				t.Errorf("%s nodes, %s survivors, adopted [%s]; want %s, 6, [4 5]", got, survivors, ad, want)
			}
			if f := failedSet(all); !slices.Equal(f, []string{"4", "5"}) {
				t.Errorf("ftrun reports ranks %v failed, want [4 5]", f)
			}
			for _, s := range []string{"root 198.18.60.13", "h1 198.18.60.13", "h3 198.18.60.254", "h3 198.18.60.11"} {
				if !seen[s] {
					t.Errorf("no blackhole route %s seen while the job ran (saw %v)", s, seen)
				}
			}
			for _, s := range []string{"root 198.18.60.11", "h1 198.18.60.12", "h3 198.18.60.13"} {
				if seen[s] {
					t.Errorf("a blackhole route %s, which the cut does not need", s)
				}
			}
			switch {
			case !adopted:
				t.Error("no survivor said it adopted rank 4 or 5")
			case !c.heal && !slices.Contains(atAdoption, "198.18.60.13"):
				t.Errorf("when a survivor adopted h3's ranks, ftrun's route to h3 was gone (%v), with no heal", atAdoption)
			case c.heal && len(atResult) > 0:
				t.Errorf("when the job printed its result, long after the heal, routes were left at ftrun's or h1: %v", atResult)
			}
			if c.heal && !strings.Contains(all, "ftrun: healed h3's links (--cut "+c.spec+"): routes removed here and on every side\n") {
				t.Error("ftrun does not say it healed")
			}
			if !strings.Contains(all, "ftrun: cut h3 off from the job's other hosts") {
				t.Error("ftrun does not say it cut h3 off")
			}
			noBlackholesLeft(t)
			if t.Failed() {
				t.Logf("output:\n%s", all)
			}
			t.Logf("--cut %s: %v", c.spec, took.Round(time.Millisecond))
		})
	}
}

// --pause of a rank on another host (rank 3 on h2): its agent stops it
// and keeps the SIGCONT's timer. A long pause gets it declared failed and
// killed through the agent; a short one fails nobody; both end with the
// failure-free result.
func TestClusterInjectPause(t *testing.T) {
	dir := needCluster(t)
	want, _ := ckptFailureFree(t)
	bin := bins(t)
	hf := hostfile(t, 4, 2)
	for _, c := range []struct {
		spec      string
		survivors string
	}{{"3@1s:3s", "7"}, {"3@1s:20ms", "8"}} {
		t.Run(c.spec, func(t *testing.T) {
			out, code, took := runCluster(t, dir, 3*time.Minute, filepath.Join(bin, "ftrun"), "--hostfile", hf, "--tag-output",
				"--pause", c.spec, filepath.Join(bin, "ckpt"))
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			got, survivors, _ := ckptResult(t, out)
			if got != want || survivors != c.survivors {
				t.Errorf("%s nodes, %s survivors; want %s, %s", got, survivors, want, c.survivors)
			}
			if !regexp.MustCompile(`(?m)^ftrun: paused rank 3 for \S+ \(--pause ` + regexp.QuoteMeta(c.spec) + `\): SIGSTOP now, SIGCONT by its agent on h2$`).MatchString(out) {
				t.Error("ftrun does not say it paused rank 3 through h2's agent")
			}
			failed := failedSet(out)
			if c.survivors == "7" {
				if !slices.Equal(failed, []string{"3"}) || !regexp.MustCompile(`(?m)^ftrun: rank 3 failed at [\d.]+s: was killed by signal 9 `).MatchString(out) {
					t.Errorf("ftrun reports ranks %v failed, want rank 3, killed", failed)
				}
			} else if failed != nil {
				t.Errorf("ranks %v failed", failed)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
			t.Logf("--pause %s: %v", c.spec, took.Round(time.Millisecond))
		})
	}
}

// The routes of --cut go with whoever added them, on SIGTERM too: h1's
// agent, terminated while h3 is cut off, removes its route to h3 at once;
// ftrun, terminated, removes its own and exits 143, and the agents left
// remove theirs as the job ends. No route is left anywhere.
func TestClusterInjectCutTerminated(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	t.Cleanup(func() { noBlackholesLeft(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), "--hostfile", hostfile(t, 4, 2), "--tag-output",
		"--cut", "h3@500ms", filepath.Join(bin, "ckpt"), "-tasks", "65536")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	until := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: not within 20 s:\n%s", what, out.String())
			}
		}
	}
	until("routes to h3 at ftrun's and on h1", func() bool {
		return slices.Contains(blackholes(t, ""), "198.18.60.13") && slices.Contains(blackholes(t, "ftc-h1"), "198.18.60.13")
	})
	var agent []string
	for _, pid := range procsOn(t, dir, "h1", "agent --boot") {
		if comm, _ := os.ReadFile("/proc/" + pid + "/comm"); strings.TrimSpace(string(comm)) == "ftrun" {
			agent = append(agent, pid)
		}
	}
	if len(agent) != 1 {
		t.Fatalf("agents on h1: %v, want one", agent)
	}
	if err := exec.Command("kill", "-TERM", agent[0]).Run(); err != nil {
		t.Fatal(err)
	}
	until("h1's agent removes its route", func() bool { return len(blackholes(t, "ftc-h1")) == 0 })
	if !slices.Contains(blackholes(t, ""), "198.18.60.13") {
		t.Error("ftrun's route to h3 went with h1's agent")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 {
		t.Errorf("ftrun exited %d on SIGTERM, want 143:\n%s", code, out.String())
	}
	noBlackholesLeft(t)
	if t.Failed() {
		t.Logf("output:\n%s", out.String())
	}
}
