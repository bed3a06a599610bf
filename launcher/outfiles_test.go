package launcher

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
)

// Open MPI's layout: DIR/1/rank.N, N zero-padded to the digits of the
// job's size (numdigs in orte_iof_base_setup_output_files).
func TestRankDirName(t *testing.T) {
	for _, c := range []struct {
		rank ftrma.Rank
		size int
		want string
	}{
		{0, 1, "rank.0"}, {0, 8, "rank.0"}, {7, 9, "rank.7"},
		{0, 10, "rank.00"}, {9, 10, "rank.09"}, {11, 12, "rank.11"},
		{5, 100, "rank.005"}, {99, 100, "rank.099"}, {3, 1000, "rank.0003"},
	} {
		if got := rankDirName(c.rank, c.size); got != c.want {
			t.Errorf("rankDirName(%d, %d) = %q, want %q", c.rank, c.size, got, c.want)
		}
	}
	o := &outputFiles{dir: "/out", size: 12}
	if got := o.rankDir(3); got != "/out/1/rank.03" {
		t.Errorf("rankDir(3) = %q", got)
	}
}

// prepare makes DIR/1, open makes rank.N with stdout and stderr (truncated
// if there), in Open MPI's modes at most; a DIR that cannot be made fails
// naming the host and the path.
func TestOutputFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "out")
	o := &outputFiles{dir: dir, size: 4, tag: true}
	if err := o.prepare("hostA"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "1", "rank.2"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "1", "rank.2", "stdout"), []byte("an earlier job's output\n"), 0o600)
	files, err := o.open(2, "hostA")
	if err != nil {
		t.Fatal(err)
	}
	files[0].write([]byte("[2] out\n"))
	files[1].write([]byte("[2] err\n"))
	closeFiles(files)
	files[0].write([]byte("after close\n")) // ignored
	for name, want := range map[string]string{"stdout": "[2] out\n", "stderr": "[2] err\n"} {
		p := filepath.Join(dir, "1", "rank.2", name)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
		if st, err := os.Stat(p); err != nil || st.Mode().Perm()&^0o644 != 0 || st.Mode().Perm()&0o600 != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0644 at most, and rw for its owner", p, st.Mode(), err)
		}
	}
	for _, d := range []string{filepath.Join(dir, "1"), filepath.Join(dir, "1", "rank.1")} {
		if d == filepath.Join(dir, "1", "rank.1") {
			f, err := o.open(1, "hostA")
			if err != nil {
				t.Fatal(err)
			}
			closeFiles(f)
		}
		if st, err := os.Stat(d); err != nil || !st.IsDir() || st.Mode().Perm()&^0o750 != 0 || st.Mode().Perm()&0o700 != 0o700 {
			t.Errorf("%s: %v, %v; want a directory of mode 0750 at most", d, st.Mode(), err)
		}
	}
	if got := o.prefix(3); got != "[3] " {
		t.Errorf("prefix with --tag-output: %q", got)
	}
	if got := (&outputFiles{}).prefix(3); got != "" {
		t.Errorf("prefix without --tag-output: %q", got)
	}
	// No directory can be made under a file, root or not.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	bad := &outputFiles{dir: filepath.Join(file, "out"), size: 2}
	err = bad.prepare("hostB")
	if err == nil || !strings.Contains(err.Error(), "on host hostB") || !strings.Contains(err.Error(), filepath.Join(file, "out", "1")) {
		t.Errorf("prepare of a directory under a file: %v; want an error naming hostB and the path", err)
	}
	if _, err := bad.open(0, "hostB"); err == nil || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "hostB") {
		t.Errorf("open under a file: %v", err)
	}
}

func TestCheckOutputFilename(t *testing.T) {
	for _, bad := range [][]string{
		{"--output-filename", "out:nocopy", "-n", "1", "prog"},
		{"--output-filename", "", "-n", "1", "prog"},
	} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("ParseArgs(%q) accepted", bad)
		}
	}
	o, err := ParseArgs([]string{"-output-filename", "out", "-n", "2", "prog"})
	if err != nil || o.OutputFilename != "out" {
		t.Errorf("ParseArgs: %+v, %v", o, err)
	}
}

func TestOutputFilesWire(t *testing.T) {
	for _, m := range []outputFilesMsg{{dir: "/a/b", tag: true}, {dir: "/c"}} {
		got, err := parseOutputFiles(m.append(nil))
		if err != nil || got != m {
			t.Errorf("round trip of %+v: %+v, %v", m, got, err)
		}
		good := m.append(nil)
		for i := range good {
			if _, err := parseOutputFiles(good[:i]); err == nil {
				t.Errorf("parseOutputFiles accepted %d of %d bytes", i, len(good))
			}
		}
		if _, err := parseOutputFiles(append(good, 0)); err == nil {
			t.Error("parseOutputFiles accepted a trailing byte")
		}
	}
	if _, err := parseOutputFiles(outputFilesMsg{dir: "rel"}.append(nil)); err == nil {
		t.Error("parseOutputFiles accepted a relative directory")
	}
}

// The report's format, line by line (README, report.go).
func TestWriteReport(t *testing.T) {
	r := JobReport{Job: "0a1b2c3d4e5f", Ranks: 4, Spares: 2, Exit: 1, End: "failed", Took: 3210 * time.Millisecond,
		Rank: []RankReport{
			{Rank: 0, Host: "node1", State: RankFinished, Code: 0, At: 3200 * time.Millisecond},
			{Rank: 1, Host: "node1", State: RankFinished, Code: 3, At: 1500 * time.Millisecond},
			{Rank: 2, Host: "node2", State: RankFailed, At: 1002 * time.Millisecond, Reason: "was killed by signal 9 (killed)\nby ftrun's --kill 2@1s"},
			{Rank: 3, Host: "node 2", State: RankKilled, At: 3100 * time.Millisecond, Reason: "was killed by signal 9 (killed): --timeout 3s expired"},
			{Rank: 4, Host: "node2", State: RankFinished, At: 3000 * time.Millisecond},
			{Rank: 5, State: RankNotStarted},
		}}
	var b bytes.Buffer
	if err := WriteReport(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `ftrun report 1
job 0a1b2c3d4e5f
ranks 4 spares 2
exit 1 failed
time 3.210s
rank 0 host node1 finished status 0 at 3.200s
rank 1 host node1 finished status 3 at 1.500s
rank 2 host node2 failed at 1.002s: was killed by signal 9 (killed) by ftrun's --kill 2@1s
rank 3 host node_2 killed at 3.100s: was killed by signal 9 (killed): --timeout 3s expired
rank 4 host node2 finished status 0 at 3.000s
rank 5 host - not-started
`
	if b.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", b.String(), want)
	}
	dir := t.TempDir()
	if err := WriteReportFile(dir, r); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "report")); err != nil || string(got) != want {
		t.Errorf("report file: %q, %v", got, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in the directory: %v", ents)
	}
}

// Each way a rank ends, and the state and reason the report gives it.
func TestRankReport(t *testing.T) {
	ok := &Result{}
	timedOut := &Result{TimedOut: true}
	kills := []KillSpec{{Rank: 2, After: time.Second}}
	for _, c := range []struct {
		name  string
		st    RankStatus
		res   *Result
		state string
		code  int
		why   string
	}{
		{"exit 0", RankStatus{Rank: 0}, ok, RankFinished, 0, ""},
		{"exit 3", RankStatus{Rank: 1, Code: 3}, ok, RankFinished, 3, ""},
		{"--kill", RankStatus{Rank: 2, Code: -1, Signal: syscall.SIGKILL, Killed: true, Failed: true}, ok, RankFailed, 0, "was killed by signal 9 (killed) by ftrun's --kill 2@1s"},
		{"crash", RankStatus{Rank: 3, Code: -1, Signal: syscall.SIGSEGV, Failed: true}, ok, RankFailed, 0, "was killed by signal 11 (segmentation fault)"},
		{"declared", RankStatus{Rank: 4, Code: -1, Signal: syscall.SIGKILL, Declared: true, Failed: true}, timedOut, RankFailed, 0, "declared failed by the ranks' failure detector; was killed by signal 9 (killed)"},
		{"lost", RankStatus{Rank: 5, Code: -1, Failed: true, lost: "agent h2 was silent for 2s"}, ok, RankFailed, 0, "was lost: agent h2 was silent for 2s"},
		{"timeout", RankStatus{Rank: 6, Code: -1, Signal: syscall.SIGKILL, Failed: true}, timedOut, RankKilled, 0, "was killed by signal 9 (killed): --timeout 5s expired"},
		{"interrupt", RankStatus{Rank: 7, Code: -1, Signal: syscall.SIGINT, Failed: true}, &Result{Signal: syscall.SIGINT}, RankKilled, 0, "was killed by signal 2 (interrupt): ftrun got interrupt"},
		{"--no-ft", RankStatus{Rank: 8, Code: -1, Signal: syscall.SIGKILL, Failed: true}, &Result{Aborted: true}, RankKilled, 0, "was killed by signal 9 (killed): --no-ft aborted the job"},
	} {
		c.st.At = time.Second
		got := rankReport(c.st, "h", c.res, kills, 5*time.Second)
		want := RankReport{Rank: int(c.st.Rank), Host: "h", State: c.state, Code: c.code, At: time.Second, Reason: c.why}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, want)
		}
	}
	for _, c := range []struct {
		res  *Result
		want string
	}{
		{&Result{Ranks: []RankStatus{{}}}, "ok"}, {&Result{Ranks: []RankStatus{{Code: 1}}}, "failed"},
		{timedOut, "timeout"}, {&Result{Signal: syscall.SIGTERM}, "interrupted"}, {&Result{Aborted: true}, "aborted"},
	} {
		if got := endWord(c.res); got != c.want {
			t.Errorf("endWord(%+v) = %q, want %q", c.res, got, c.want)
		}
	}
}

// An agent that cannot write DIR answers msgOutputFiles with why, naming
// its host and the path, and serves no launch.
func TestAgentOutputFilesRefused(t *testing.T) {
	a, logs := startAgent(t, "print", false)
	l, err := dialAgent(a.Addr().String(), testAgentKey())
	if err != nil {
		t.Fatal(err)
	}
	defer l.conn.Close()
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	l.conn.SetDeadline(time.Now().Add(testTimeout))
	if err := jobwire.WriteFrame(l.conn, msgOutputFiles, outputFilesMsg{dir: filepath.Join(file, "out")}.append(nil)); err != nil {
		t.Fatal(err)
	}
	typ, p, err := jobwire.ReadFrame(l.conn, maxLaunch)
	if err != nil || typ != msgOutputReady {
		t.Fatalf("answer %d %q, %v; want output ready", typ, p, err)
	}
	want := "--output-filename: cannot write " + filepath.Join(file, "out", "1") + " on host " + hostName()
	if !strings.HasPrefix(string(p), want) {
		t.Errorf("answer %q, want it to start with %q", p, want)
	}
	if _, _, err := jobwire.ReadFrame(l.conn, maxLaunch); err == nil {
		t.Error("the agent kept the connection")
	}
	if !strings.Contains(logs.String(), want) {
		t.Errorf("agent log:\n%s", logs)
	}
}
