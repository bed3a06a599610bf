package launcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ftrma/ftrma"
)

// readRankFiles returns rank r's stdout and stderr files under dir, in a
// job of size world ranks; a file that is missing fails the test.
func readRankFiles(t *testing.T, dir string, r, size int) (stdout, stderr string) {
	t.Helper()
	var got [2]string
	for i, name := range []string{"stdout", "stderr"} {
		b, err := os.ReadFile(filepath.Join(dir, "1", rankDirName(ftrma.Rank(r), size), name))
		if err != nil {
			t.Error(err)
		}
		got[i] = string(b)
	}
	return got[0], got[1]
}

// readReport returns DIR/report.
func readReport(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A job on this host with --output-filename, given relative to ftrun's
// working directory: each rank's lines are in its files, tagged as ftrun
// prints them (--tag-output: Open MPI tags the files too), besides on
// ftrun's stdout and stderr; the report says every rank finished.
func TestProcessOutputFilename(t *testing.T) {
	wd := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*helperLife)
	defer cancel()
	cmd := helperCmd(t, ctx, "print", []string{"-n", "3", "--tag-output", "--output-filename", "out", "--timeout", "60s"})
	cmd.Dir = wd
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ftrun: %v\nstderr:\n%s", err, stderr.String())
	}
	dir := filepath.Join(wd, "out")
	for r := range 3 {
		out, errs := readRankFiles(t, dir, r, 3)
		if want := fmt.Sprintf("[%d] hello from rank %d\n", r, r); out != want || !strings.Contains(stdout.String(), want) {
			t.Errorf("rank %d: stdout file %q, want %q, as ftrun printed it:\n%s", r, out, want, stdout.String())
		}
		if want := fmt.Sprintf("[%d] warning from rank %d\n", r, r); errs != want || !strings.Contains(stderr.String(), want) {
			t.Errorf("rank %d: stderr file %q, want %q, as ftrun printed it:\n%s", r, errs, want, stderr.String())
		}
	}
	rep := readReport(t, dir)
	want := regexp.MustCompile(`^ftrun report 1\njob [0-9a-f]+\nranks 3 spares 0\nexit 0 ok\ntime [0-9.]+s\n` +
		`rank 0 host \S+ finished status 0 at [0-9.]+s\nrank 1 host \S+ finished status 0 at [0-9.]+s\nrank 2 host \S+ finished status 0 at [0-9.]+s\n$`)
	if !want.MatchString(rep) {
		t.Errorf("report:\n%s", rep)
	}
	if !strings.Contains(rep, " host "+word(hostName())+" ") {
		t.Errorf("report does not name this host %q:\n%s", hostName(), rep)
	}
}

// A DIR that cannot be made fails the job before any rank starts, naming
// the host and the path.
func TestProcessOutputFilenameUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	stdout, stderr, code := runJob(t, "print", []string{"-n", "2", "--output-filename", filepath.Join(file, "out")})
	want := "ftrun: --output-filename: cannot write " + filepath.Join(file, "out", "1") + " on host " + hostName() + ": "
	if code != ExitLaunch || !strings.HasPrefix(stderr, want) || stdout != "" {
		t.Errorf("exit %d, want %d; stdout %q; stderr:\n%s\nwant it to start with %q", code, ExitLaunch, stdout, stderr, want)
	}
}

// Over two hosts: the agent writes its rank's files (it says so in its
// log), ftrun its own rank's; the report names each rank's host.
func TestMultiHostOutputFilename(t *testing.T) {
	t.Setenv(EnvAgentSecret, testAgentSecret)
	ag := startAgentDaemon(t, "print")
	dir := t.TempDir()
	stdout, stderr, code := runJob(t, "print", []string{"-n", "2", "--hosts", "local:1," + ag.addr + ":1", "--output-filename", dir, "--timeout", "60s"})
	if code != ExitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s\nagent:\n%s", code, stdout, stderr, ag.logs)
	}
	for r := range 2 {
		out, errs := readRankFiles(t, dir, r, 2)
		if want := fmt.Sprintf("hello from rank %d\n", r); out != want {
			t.Errorf("rank %d: stdout file %q, want %q", r, out, want)
		}
		if want := fmt.Sprintf("warning from rank %d\n", r); errs != want {
			t.Errorf("rank %d: stderr file %q, want %q", r, errs, want)
		}
	}
	if code := ag.wait(t); code != 0 {
		t.Errorf("agent exited %d", code)
	}
	if want := "the ranks' output goes to files under " + filepath.Join(dir, "1"); !strings.Contains(ag.logs.String(), want) {
		t.Errorf("agent log does not say %q:\n%s", want, ag.logs)
	}
	rep := readReport(t, dir)
	for _, want := range []string{
		"rank 0 host " + word(hostName()) + " finished status 0 at ",
		"rank 1 host " + ag.addr + " finished status 0 at ",
	} {
		if !strings.Contains(rep, "\n"+want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}

// A spare gets its rank directory as the others; a spare never started
// has none, and the report says so.
func TestRespawnOutputFilename(t *testing.T) {
	dir := t.TempDir()
	out := runRespawn(t, -1, "--respawn=2", "--output-filename", dir)
	wantLines(t, out, `rank 2 payload x live true,true,true,false`)
	got, _ := readRankFiles(t, dir, 2, 4)
	if !regexp.MustCompile(`(?m)^rank 2 payload x live true,true,true,false$`).MatchString(got) {
		t.Errorf("spare rank 2's stdout file:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "1", "rank.3")); !os.IsNotExist(err) {
		t.Errorf("spare rank 3, never started, has a directory: %v", err)
	}
	rep := readReport(t, dir)
	for _, want := range []string{
		"ranks 2 spares 2\nexit 0 ok\n",
		"\nrank 2 host " + word(hostName()) + " finished status 0 at ",
		"\nrank 3 host - not-started\n",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}
