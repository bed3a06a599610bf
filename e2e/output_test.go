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
	"strings"
	"syscall"
	"testing"
	"time"
)

// ftrun --output-filename DIR (README, launcher/outfiles.go): every rank's
// output also lands in DIR/1/rank.N/stdout and stderr, written on the
// rank's host, and ftrun writes the job's report to DIR/report.

// rankLines returns the lines of out that rank r wrote (--tag-output), in
// order, tag included, each with its newline.
func rankLines(out string, r int) string {
	var b strings.Builder
	tag := fmt.Sprintf("[%d] ", r)
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(l, tag) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// rankFile returns DIR/1/rank.R/name; a missing file fails the test.
func rankFile(t *testing.T, dir string, r int, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "1", "rank."+strconv.Itoa(r), name))
	if err != nil {
		t.Error(err)
	}
	return string(b)
}

// The checkpointing example on this host with rank 2 killed mid-run: every
// rank has its two files, each holding exactly the lines ftrun forwarded
// for it (--tag-output tags them, as Open MPI's do), so rank 2's hold what
// it wrote before it died; the result line is in a survivor's stdout file;
// DIR/report says rank 2 failed and the others exited 0.
func TestOutputFilename(t *testing.T) {
	prog := filepath.Join(bins(t), "ckpt")
	const n = 6
	// A failure-free run says when the kill lands mid-run (half-way).
	start := time.Now()
	out, code := ftrun(t, 2*time.Minute, "-n", strconv.Itoa(n), "--tag-output", prog)
	d := time.Since(start)
	if code != 0 {
		t.Fatalf("failure-free run: exit %d:\n%s", code, out)
	}
	want, _, _ := ckptResult(t, out)
	kill := fmt.Sprintf("2@%v", (d / 2).Round(time.Millisecond))

	dir := filepath.Join(sharedTempDir(t), "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(transportArgs(), "-n", strconv.Itoa(n), "-v", "--tag-output", "--kill", kill, "--output-filename", dir, prog)
	cmd := exec.CommandContext(ctx, filepath.Join(bins(t), "ftrun"), args...)
	cmd.Dir = bins(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		t.Fatalf("ftrun %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	got, survivors, _ := ckptResult(t, stdout.String())
	if got != want || survivors != strconv.Itoa(n-1) {
		t.Errorf("result %s nodes, %s survivors; want %s, %d", got, survivors, want, n-1)
	}
	for r := range n {
		for _, s := range []struct {
			name, forwarded string
		}{{"stdout", stdout.String()}, {"stderr", stderr.String()}} {
			file, fwd := rankFile(t, dir, r, s.name), rankLines(s.forwarded, r)
			if file != fwd {
				t.Errorf("rank %d's %s file:\n%s\nftrun forwarded:\n%s", r, s.name, file, fwd)
			}
		}
	}
	if rankFile(t, dir, 2, "stdout")+rankFile(t, dir, 2, "stderr") == "" {
		t.Errorf("rank 2's files are empty: with -v it logs its join before it is killed")
	}
	m := regexp.MustCompile(`(?m)^\[(\d+)\] result: `).FindStringSubmatch(stdout.String())
	if m == nil || m[1] == "2" || !strings.Contains(rankFile(t, dir, atoi(m[1]), "stdout"), "] result: ") {
		t.Errorf("the result line is not in a survivor's stdout file (%q)", m)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report"))
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, re := range []string{
		`^ftrun report 1\njob [0-9a-f]+\nranks 6 spares 0\nexit 0 ok\ntime [0-9.]+s\n`,
		`(?m)^rank 2 host \S+ failed at [0-9.]+s: was killed by signal 9 \(killed\) by ftrun's --kill ` + regexp.QuoteMeta(kill) + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(report) {
			t.Errorf("report does not match %q:\n%s", re, report)
		}
	}
	for _, r := range []int{0, 1, 3, 4, 5} {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d host \S+ finished status 0 at [0-9.]+s$`, r)).MatchString(report) {
			t.Errorf("report does not say rank %d finished with status 0:\n%s", r, report)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// Over the cluster (ftrun in the root namespace, two ranks on each of h1,
// h2, h3, started by their agents over ssh): the agents write their ranks'
// files themselves. Proof: ftrun is stopped (SIGSTOP) while the ranks
// write "saw go"; the lines reach every rank's file while ftrun cannot
// run, so nothing but the agents wrote them. The ranks' leases and the
// agents' links are stretched (--hb-timeout 600ms: ten times the default
// timing) so that the pause costs the job nothing. After SIGCONT the job
// ends with status 0, ftrun has forwarded the same lines, and the report
// names each rank's host.
func TestOutputCluster(t *testing.T) {
	dir := needCluster(t)
	bin := bins(t)
	hf := hostfile(t, 3, 2)
	work := t.TempDir()
	os.Chmod(work, 0o777)
	out, goFile := filepath.Join(work, "out"), filepath.Join(work, "go")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := clusterCmd(ctx, t, dir, filepath.Join(bin, "ftrun"), "--hostfile", hf, "--hb-timeout", "600ms", "--tag-output",
		"--output-filename", out, filepath.Join(bin, "testprog"), "outwait", goFile)
	job := startLive(t, cmd)
	job.waitReady(t, 6)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	cont := func() {
		if stopped {
			stopped = false
			cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer cont()
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	missing := []int{0, 1, 2, 3, 4, 5}
	for len(missing) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		var still []int
		for _, r := range missing {
			b, _ := os.ReadFile(filepath.Join(out, "1", "rank."+strconv.Itoa(r), "stdout"))
			if !strings.Contains(string(b), fmt.Sprintf("[%d] saw go\n", r)) {
				still = append(still, r)
			}
		}
		missing = still
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid)); err == nil {
		// The third field is the state: T (stopped) all along.
		if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) == 0 || f[0] != "T" {
			t.Errorf("ftrun was not stopped while the files were checked: state %q", f)
		}
	}
	if len(missing) > 0 {
		t.Errorf("with ftrun stopped, the stdout files of ranks %v did not get their \"saw go\" line within 5 s", missing)
	}
	cont()
	outText, errText := job.finish()
	if ctx.Err() != nil {
		t.Fatalf("ftrun did not end:\n%s\n%s", outText, errText)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d, want 0:\n%s\n%s", code, outText, errText)
	}
	for r := range 6 {
		file, fwd := rankFile(t, out, r, "stdout"), rankLines(outText, r)
		if file != fwd || !strings.Contains(file, "saw go") {
			t.Errorf("rank %d's stdout file:\n%s\nftrun forwarded:\n%s", r, file, fwd)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "report"))
	if err != nil {
		t.Fatal(err)
	}
	for r := range 6 {
		want := fmt.Sprintf("\nrank %d host h%d finished status 0 at ", r, r/2+1)
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q:\n%s", want, b)
		}
	}
}
