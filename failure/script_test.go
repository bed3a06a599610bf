package failure

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt scripts")

// TestScripts runs the scenario scripts in testdata/*.txt. A script is a
// series of blocks:
//
//	# comments
//	command key=value ...
//	----
//	expected output
//
// separated by blank lines. Times are offsets from a fixed epoch ("t=70ms").
// The commands:
//
//	new self=S n=N [period=D] [timeout=D]  start a detector at t=0
//	tick t=D                               Tick
//	heartbeat from=R t=D                   Heartbeat
//	failed r=R t=D                         Failed
//	ticks from=D to=D every=D              Tick repeatedly
//
// After each command the output shows Ready (then acknowledged by Advance),
// if any, and the detector's state: whom it observes and when that rank's
// Timeout runs out, whom it sends to and when the next heartbeat is due, and
// the failed ranks. Run with -rewrite to refresh the
// expected output after a deliberate change, and review the diff.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScript(t, file)
		})
	}
}

type block struct {
	pre  []string // comments and blank lines before the command
	cmd  string
	line int // of cmd, 1-based
	want []string
}

func parseScript(t *testing.T, file string) []block {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []block
	var cur block
	state := 0 // 0: before command, 1: expect "----", 2: in output
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		switch state {
		case 0:
			if line == "" || strings.HasPrefix(line, "#") {
				cur.pre = append(cur.pre, line)
				continue
			}
			cur.cmd, cur.line, state = line, ln, 1
		case 1:
			if line != "----" {
				t.Fatalf("%s:%d: want ----, got %q", file, ln, line)
			}
			state = 2
		case 2:
			if line == "" {
				blocks = append(blocks, cur)
				cur, state = block{}, 0
				continue
			}
			cur.want = append(cur.want, line)
		}
	}
	if state == 1 {
		t.Fatalf("%s: command %q has no ----", file, cur.cmd)
	}
	if state == 2 {
		blocks = append(blocks, cur)
	}
	return blocks
}

func runScript(t *testing.T, file string) {
	blocks := parseScript(t, file)
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var d *Detector
	var out strings.Builder
	for i := range blocks {
		b := &blocks[i]
		got := execCommand(t, file, b, epoch, &d)
		if *rewrite {
			b.want = got
			continue
		}
		if strings.Join(got, "\n") != strings.Join(b.want, "\n") {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, b.line, b.cmd,
				strings.Join(got, "\n"), strings.Join(b.want, "\n"))
		}
	}
	if !*rewrite {
		return
	}
	for i, b := range blocks {
		for _, p := range b.pre {
			out.WriteString(p + "\n")
		}
		out.WriteString(b.cmd + "\n----\n")
		for _, w := range b.want {
			out.WriteString(w + "\n")
		}
		if i < len(blocks)-1 {
			out.WriteString("\n")
		}
	}
	if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func execCommand(t *testing.T, file string, b *block, epoch time.Time, dp **Detector) []string {
	fields := strings.Fields(b.cmd)
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("%s:%d: argument %q is not key=value", file, b.line, f)
		}
		args[k] = v
	}
	num := func(key string) int {
		v, err := strconv.Atoi(args[key])
		if err != nil {
			t.Fatalf("%s:%d: %s=%q: %v", file, b.line, key, args[key], err)
		}
		return v
	}
	dur := func(key string) time.Duration {
		if args[key] == "" {
			return 0
		}
		v, err := time.ParseDuration(args[key])
		if err != nil {
			t.Fatalf("%s:%d: %s=%q: %v", file, b.line, key, args[key], err)
		}
		return v
	}
	at := func(key string) time.Time { return epoch.Add(dur(key)) }
	if fields[0] != "new" && *dp == nil {
		t.Fatalf("%s:%d: %s before new", file, b.line, fields[0])
	}
	var out []string
	collect := func(now time.Duration) {
		d := *dp
		if d.HasReady() {
			rd := d.Ready()
			out = append(out, fmt.Sprintf("%v: heartbeats=%v suspected=%v", now, fmtRanks(rd.Heartbeats), fmtRanks(rd.Suspected)))
			d.Advance()
		}
	}
	switch fields[0] {
	case "new":
		d, err := New(Config{Period: dur("period"), Timeout: dur("timeout")}, num("self"), num("n"), epoch)
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		*dp = d
		collect(0)
	case "tick":
		(*dp).Tick(at("t"))
		collect(dur("t"))
	case "heartbeat":
		(*dp).Heartbeat(num("from"), at("t"))
		collect(dur("t"))
	case "failed":
		(*dp).Failed(num("r"), at("t"))
		collect(dur("t"))
	case "ticks":
		for now := dur("from"); now <= dur("to"); now += dur("every") {
			(*dp).Tick(epoch.Add(now))
			collect(now)
		}
	default:
		t.Fatalf("%s:%d: unknown command %q", file, b.line, fields[0])
	}
	d := *dp
	state := fmt.Sprintf("observed=%d", d.Observed())
	if d.Observed() >= 0 {
		state += fmt.Sprintf(" (suspect at %v)", d.heardAt.Add(d.cfg.Timeout).Sub(epoch))
	}
	state += fmt.Sprintf(" observer=%d", d.Observer())
	if d.Observer() >= 0 {
		state += fmt.Sprintf(" (beat at %v)", d.beatDue.Sub(epoch))
	}
	return append(out, state+" failed="+fmtRanks(d.FailedRanks()))
}

func fmtRanks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return "[" + strings.Join(s, " ") + "]"
}
