package e2e

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/ftrma/ftrma/internal/check/kvcheck"
)

// readHistory reads the hist.* files kvlin wrote: a call without a return,
// or a put or delete that returned an error, may or may not have taken
// effect, so it stays open to the end; a get without an answer is dropped.
func readHistory(t *testing.T, dir string) (ops []porcupine.Operation, done, open int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "hist.*"))
	if len(files) == 0 {
		t.Fatal("no history files")
	}
	type call struct {
		cl   int
		in   kvcheck.Input
		at   int64
		seen bool
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		calls := map[int]*call{}
		var order []int
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			w := strings.Fields(sc.Text())
			if len(w) < 6 {
				continue // a line cut by the kill
			}
			id, _ := strconv.Atoi(w[2])
			switch {
			case w[0] == "C" && len(w) == 7:
				cl, _ := strconv.Atoi(w[1])
				k, _ := strconv.Atoi(w[4])
				at, _ := strconv.ParseInt(w[6], 10, 64)
				in := kvcheck.Input{Kind: w[3], Key: k, Value: w[5]}
				if in.Kind == "cas" {
					o, n, _ := strings.Cut(w[5], ">")
					in.Old, in.Value = strings.TrimPrefix(o, "-"), n
				}
				calls[id] = &call{cl: cl, in: in, at: at}
				order = append(order, id)
			case w[0] == "R":
				c := calls[id]
				at, err := strconv.ParseInt(w[5], 10, 64)
				if c == nil || err != nil {
					continue
				}
				c.seen = true
				out := kvcheck.Output{}
				switch w[3] {
				case "ok":
					if c.in.Kind == "get" {
						out.Value = w[4]
					}
					out.Swapped = c.in.Kind == "cas" && w[4] == "true"
				case "notfound":
				default:
					if c.in.Kind == "get" {
						continue // no effect
					}
					out.Unknown, at = true, math.MaxInt64
					open++
				}
				if !out.Unknown {
					done++
				}
				ops = append(ops, porcupine.Operation{ClientId: c.cl, Input: c.in, Call: c.at, Output: out, Return: at})
			}
		}
		f.Close()
		for _, id := range order {
			if c := calls[id]; !c.seen && c.in.Kind != "get" {
				ops = append(ops, porcupine.Operation{ClientId: c.cl, Input: c.in, Call: c.at, Output: kvcheck.Output{Unknown: true}, Return: math.MaxInt64})
				open++
			}
		}
	}
	return ops, done, open
}

// The store's linearizability under SIGKILLs: 8 ranks, 16 clients on 4
// shared keys (concurrent writers on purpose), Copies 3, and two ranks killed
// (Copies−1) during the run, at once or one after the other. The history of
// every key must be linearizable; every key must end with 3 whole replicas.
func TestStoreLinearizableUnderKills(t *testing.T) { eachTransport(t, testStoreLinearizableUnderKills) }

func testStoreLinearizableUnderKills(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, c := range []struct {
		name string
		gap  time.Duration
	}{{"simultaneous", 0}, {"staggered", 700 * time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) {
			dir := sharedTempDir(t)
			a := 1 + rng.IntN(7)
			b := 1 + (a+rng.IntN(6))%7
			at := 700*time.Millisecond + time.Duration(rng.IntN(600))*time.Millisecond
			run := "2.5s"
			if emulated() {
				at, run = at+6*time.Second, "10s"
			}
			t.Logf("seed %d: killing ranks %d at %v and %d at %v", seed, a, at, b, at+c.gap)
			out, code := ftrun(t, 4*time.Minute, "-n", "8", "--tag-output",
				"--kill", fmt.Sprintf("%d@%v", a, at), "--kill", fmt.Sprintf("%d@%v", b, at+c.gap),
				filepath.Join(bins(t), "testprog"), "kvlin", dir, run, "3", "4", "6ms")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			checkKVLin(t, dir, out, seed)
		})
	}
}

// checkKVLin checks a kvlin job of 4 keys with 3 copies whose output is
// out and histories are in dir: every key got 3 whole replicas back,
// enough operations completed, compare-and-swaps both swapped and did
// not, and the history is linearizable (a visualization is kept under the
// seed's name when it is not).
func checkKVLin(t *testing.T, dir, out string, seed uint64) {
	t.Helper()
	for k := range 4 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)\] whole %d 3$`, k)).MatchString(out) {
			t.Errorf("key %d did not get 3 whole replicas back:\n%s", k, out)
		}
	}
	ops, done, open := readHistory(t, dir)
	if least := map[bool]int{false: 500, true: 150}[emulated()]; done < least {
		t.Fatalf("only %d operations completed:\n%s", done, out)
	}
	swaps := map[bool]int{}
	for _, op := range ops {
		if in, out := op.Input.(kvcheck.Input), op.Output.(kvcheck.Output); in.Kind == "cas" && !out.Unknown {
			swaps[out.Swapped]++
		}
	}
	if swaps[true] == 0 || swaps[false] == 0 {
		t.Errorf("compare-and-swaps: %d swapped, %d did not: the history does not test both", swaps[true], swaps[false])
	}
	t.Logf("compare-and-swaps: %d swapped, %d did not", swaps[true], swaps[false])
	res, info := porcupine.CheckOperationsVerbose(kvcheck.Model, ops, time.Minute)
	t.Logf("%d operations completed, %d left open by kills or errors: %v", done, open, res)
	if res != porcupine.Ok {
		viz := filepath.Join(os.TempDir(), fmt.Sprintf("ftrma-lin-%d.html", seed))
		if err := porcupine.VisualizePath(kvcheck.Model, info, viz); err == nil {
			t.Logf("visualization in %s", viz)
		}
		t.Fatalf("history not linearizable (%v)", res)
	}
}

// The same under respawn (ftrun --respawn=2, kvlin ... respawn): ranks
// killed during the run are replaced while the clients go on, the store
// grows onto each new communicator (Grow at the survivors, Join at the
// replacement, whose clients then run too), and the history of every key
// stays linearizable, every key ending with 3 whole replicas.
func TestStoreLinearizableUnderRespawn(t *testing.T) {
	eachTransport(t, testStoreLinearizableUnderRespawn)
}

func testStoreLinearizableUnderRespawn(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	for _, c := range []struct {
		name  string
		kills int
	}{{"one", 1}, {"two", 2}} {
		t.Run(c.name, func(t *testing.T) {
			dir := sharedTempDir(t)
			a := 1 + rng.IntN(7)
			b := 1 + (a+rng.IntN(6))%7
			at := 600*time.Millisecond + time.Duration(rng.IntN(400))*time.Millisecond
			run := "2.5s"
			if emulated() {
				at, run = at+6*time.Second, "10s"
			}
			// Spares to spare: a kill during a Replace calls it off, and
			// the spares it started are used up.
			args := []string{"--respawn=4", "-n", "8", "--tag-output", "--kill", fmt.Sprintf("%d@%v", a, at)}
			t.Logf("seed %d: killing rank %d at %v", seed, a, at)
			if c.kills == 2 {
				args = append(args, "--kill", fmt.Sprintf("%d@%v", b, at+500*time.Millisecond))
				t.Logf("and rank %d at %v", b, at+500*time.Millisecond)
			}
			args = append(args, filepath.Join(bins(t), "testprog"), "kvlin", dir, run, "3", "4", "6ms", "respawn")
			out, code := ftrun(t, 4*time.Minute, args...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			if n := len(regexp.MustCompile(`(?m)\] replaced: 8 ranks now$`).FindAllString(out, -1)); n < 8-c.kills {
				t.Errorf("%d ranks replaced the failed ones, want at least the %d survivors:\n%s", n, 8-c.kills, out)
			}
			// The replacements' histories (world ranks 8 and up): a spare
			// whose Replace was called off runs no clients.
			hists, _ := filepath.Glob(filepath.Join(dir, "hist.*"))
			spares := 0
			for _, h := range hists {
				if r, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(h), "hist.")); err == nil && r >= 8 {
					spares++
				}
			}
			if spares != c.kills {
				t.Errorf("%d replacements ran clients, want %d", spares, c.kills)
			}
			checkKVLin(t, dir, out, seed)
		})
	}
}

// A rank that shares no key with a killed rank sees no pause: its put
// latency across the failure stays below the failure detector's timeout.
func TestStoreUninvolvedRankNoPause(t *testing.T) { eachTransport(t, testStoreUninvolvedRankNoPause) }

func testStoreUninvolvedRankNoPause(t *testing.T) {
	// The victim prints its pid once every rank is putting; it is killed
	// (by pid: with FTRMA_E2E_HOSTS it is in this host's block) a while later.
	after, run := 1500*time.Millisecond, "3s"
	if emulated() {
		after, run = 4*time.Second, "12s"
	}
	j := startJob(t, "-n", "6", "--tag-output", filepath.Join(bins(t), "testprog"), "kvpause", "2", "3", run)
	pid := pidOf(t, j.waitLine(t, regexp.MustCompile(`^\[2\] pid (\d+)$`))[1])
	time.Sleep(after)
	syscall.Kill(pid, syscall.SIGKILL) // a rank process of this test's own job
	code := j.wait(t)
	out := j.output()
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	re := regexp.MustCompile(`(?m)^\[(\d)\] (before|pause) (\d+) (\d+) (\d+)$`)
	ms := re.FindAllStringSubmatch(out, -1)
	if len(ms) != 8 { // ranks 0, 1, 4, 5: two lines each
		t.Fatalf("want before/pause lines of 4 uninvolved ranks:\n%s", out)
	}
	// ftrun's detector timeout for 6 ranks on this machine's CPUs.
	bound := 60 * time.Millisecond * time.Duration((6+numCPU()-1)/numCPU())
	if hbTimeout() != detectorTimeout {
		bound = hbTimeout() // as the jobs were told
	}
	for _, m := range ms {
		maxUS, _ := strconv.Atoi(m[3])
		when := map[string]string{"before": "before the failure", "pause": "across the failure"}[m[2]]
		t.Logf("rank %s %s: max %d us, p50 %s us over %s puts", m[1], when, maxUS, m[4], m[5])
		if m[2] == "pause" && time.Duration(maxUS)*time.Microsecond >= bound {
			t.Errorf("rank %s paused %v across the failure (bound %v)", m[1], time.Duration(maxUS)*time.Microsecond, bound)
		}
	}
}

func numCPU() int { return runtime.NumCPU() }

// checkLinearizable checks the histories of a cluster run (read from dir
// as ops, completed and open counted) against the store's model with
// porcupine, and fails the test if they are not linearizable, keeping the
// history files and porcupine's view of them in a new directory for
// inspection.
//
// A history with operations left open (their outcome unknown) can take
// porcupine long to search: one of a cluster run's (4,775 operations, 7
// open) took 59 s on an idle machine and passed, and timed out at a minute
// under CI's load, which reads "Unknown". An Unknown is searched again for
// up to four minutes more before it fails the test.
func checkLinearizable(t *testing.T, dir string, ops []porcupine.Operation, completed, open int) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(kvcheck.Model, ops, time.Minute)
	if res == porcupine.Unknown {
		t.Logf("porcupine decided nothing within a minute (%d ops, %d open): searching again for up to 4 minutes", completed, open)
		res, info = porcupine.CheckOperationsVerbose(kvcheck.Model, ops, 4*time.Minute)
	}
	if res == porcupine.Ok {
		return
	}
	keep, _ := os.MkdirTemp("", "ftrma-history-")
	files, _ := filepath.Glob(filepath.Join(dir, "hist.*"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			os.WriteFile(filepath.Join(keep, filepath.Base(f)), b, 0o644)
		}
	}
	porcupine.VisualizePath(kvcheck.Model, info, filepath.Join(keep, "history.html"))
	t.Errorf("history not linearizable (%v, %d ops, %d open): kept in %s", res, completed, open, keep)
}
