package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// Slow is not dead, across hosts. The checkpointing example on two hosts
// with four ranks each runs beside a CPU hog on this 2-core machine: no rank
// is killed, and the result is the failure-free one. A suspicion that ftrun
// refutes (the suspect answers its probe) fails the run too (the issue's
// bar: none at all), unless FTRMA_LOAD_STRICT=0, which only counts them.
// Since every rank leads a session of its own (launcher/proc_linux.go) there
// were none in 20 runs of 32,768 tasks beside cpuHog; before, with the ranks
// in their agent's session, 70 in 8 runs beside one loop, 2 of them ending
// with a rank whose lease ran out. FTRMA_LOAD_RUNS sets the number of runs
// (default 2; the bar is 20) and FTRMA_LOAD_TASKS the example's
// tasks (default 4096; the run had 32,768, about 17 s a run here).
//
// Then four hosts with four ranks each, and one host cut midway: the
// failure-free result, with every rank of the three hosts that reach ftrun
// surviving (12 survivors).
func TestClusterLoad(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	ftrunBin, prog := filepath.Join(bin, "ftrun"), filepath.Join(bin, "ckpt")
	runs := 2
	if v := os.Getenv("FTRMA_LOAD_RUNS"); v != "" {
		var err error
		if runs, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	tasks := "4096"
	if v := os.Getenv("FTRMA_LOAD_TASKS"); v != "" {
		tasks = v
	}
	result := func(tasks string) string {
		out, code := ftrun(t, 3*time.Minute, "-n", "8", "--tag-output", prog, "-tasks", tasks)
		if code != 0 {
			t.Fatalf("one-host run: exit %d:\n%s", code, out)
		}
		nodes, _, _ := ckptResult(t, out)
		return nodes
	}
	want := result(tasks)
	suspected := regexp.MustCompile(`(?m)^ftrun: rank \d+.* suspected by .*$|^ftrun: rank \d+ was declared failed.*$`)
	declared := regexp.MustCompile(`(?m)^ftrun: rank \d+ was declared failed.*$`)
	strict := os.Getenv("FTRMA_LOAD_STRICT") != "0"

	t.Run("hog", func(t *testing.T) {
		cpuHog(t, time.Duration(runs)*4*time.Minute)
		hf := hostfile(t, 2, 4)
		total := 0
		for i := range runs {
			out, code, took := runCluster(t, dir, 3*time.Minute, ftrunBin, "--hostfile", hf, "--tag-output", prog, "-tasks", tasks)
			got, survivors, _ := ckptResult(t, out)
			s := suspected.FindAllString(out, -1)
			total += len(s)
			if code != 0 || got != want || survivors != "8" {
				t.Errorf("run %d: exit %d, %s nodes, %s survivors; want 0, %s, 8:\n%s", i, code, got, survivors, want, out)
			}
			if killed := declared.FindAllString(out, -1); len(killed) > 0 {
				t.Errorf("run %d: healthy ranks declared failed:\n%s", i, out)
			} else if len(s) > 0 && strict {
				t.Errorf("run %d: %d suspicions without failures (refuted, nobody killed):\n%s", i, len(s), out)
			}
			t.Logf("run %d: %v, %d suspicions", i, took.Round(time.Millisecond), len(s))
		}
		t.Logf("%d runs beside a CPU hog: %d suspicions", runs, total)
	})

	t.Run("cut", func(t *testing.T) {
		hf := hostfile(t, 4, 4)
		n, _ := strconv.Atoi(tasks)
		want := result(strconv.Itoa(4 * n))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// Four times the tasks, so that the cut comes midway.
		cmd := clusterCmd(ctx, t, dir, ftrunBin, "--hostfile", hf, "--tag-output", prog, "-tasks", strconv.Itoa(4*n))
		var outBuf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		if o, err := exec.Command(clusterScript(), "cut", dir, "h4").CombinedOutput(); err != nil {
			t.Fatalf("cut: %v\n%s", err, o)
		}
		defer exec.Command(clusterScript(), "heal", dir, "h4").Run()
		err := cmd.Wait()
		out := outBuf.String()
		if ctx.Err() != nil {
			t.Fatalf("ftrun did not end:\n%s", out)
		}
		if err != nil {
			t.Errorf("ftrun: %v:\n%s", err, out)
		}
		got, survivors, _ := ckptResult(t, out)
		if got != want || survivors != "12" {
			t.Errorf("%s nodes, %s survivors; want %s, 12:\n%s", got, survivors, want, out)
		}
		for r := range 12 {
			if regexp.MustCompile(fmt.Sprintf(`(?m)^ftrun: rank %d (failed|was declared)`, r)).MatchString(out) {
				t.Errorf("rank %d, on a host that reaches ftrun, was lost:\n%s", r, out)
			}
		}
	})
}
