package agree

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt scripts")

// TestScripts runs the scenario scripts in testdata/*.txt: hand-picked
// schedules that show the protocol's rules at work, message by message. A
// script is a series of blocks
//
//	# comments
//	command key=value ...
//	----
//	expected output
//
// separated by blank lines. The commands drive a group of machines over a
// hand-operated network (FIFO per pair):
//
//	new n=N                          N fresh machines
//	start r=RANKS inst=I value=V     Start(I, V) at each rank (V in hex)
//	failed r=RANKS of=X              Failed(X) at each rank ("all": every live rank but X)
//	crash r=X [lose=all|none]        X stops; its messages in flight are lost (default) or kept
//	deliver from=F to=T [n=K]        deliver the K (default 1) oldest messages F->T
//	drop from=F to=T [n=K]           lose them instead
//	stabilize                        deliver every message, oldest first, until none is left
//	pending                          list the messages in flight
//
// RANKS is "all", or a comma-separated list of ranks and ranges ("0,2-4").
// The output shows every message delivered (recv), lost (lost), sent (send),
// and every decision (decide). Run with -rewrite to refresh the expected
// output after a deliberate change, and review the diff.
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

type scriptBlock struct {
	pre  []string // comments and blank lines before the command
	cmd  string
	line int // of cmd, 1-based
	want []string
}

func parseScript(t *testing.T, file string) []scriptBlock {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []scriptBlock
	var cur scriptBlock
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
				cur, state = scriptBlock{}, 0
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
	var net *scriptNet
	for i := range blocks {
		b := &blocks[i]
		got := net.exec(t, file, b, &net)
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
	var out strings.Builder
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

// scriptNet is the hand-operated network of a script.
type scriptNet struct {
	ag   []*Agreement
	dead []bool
	fifo []scriptMsg // in flight, oldest first
	out  []string
}

type scriptMsg struct {
	from, to int
	msg      Message
}

func (s *scriptNet) exec(t *testing.T, file string, b *scriptBlock, sp **scriptNet) []string {
	fields := strings.Fields(b.cmd)
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("%s:%d: argument %q is not key=value", file, b.line, f)
		}
		args[k] = v
	}
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("%s:%d: %s", file, b.line, fmt.Sprintf(format, a...))
	}
	num := func(key string, def int) int {
		v, ok := args[key]
		if !ok {
			if def < 0 {
				fail("%s needs %s=", fields[0], key)
			}
			return def
		}
		x, err := strconv.Atoi(v)
		if err != nil {
			fail("%s=%q: %v", key, v, err)
		}
		return x
	}
	if fields[0] != "new" && s == nil {
		fail("%s before new", fields[0])
	}
	ranks := func(except int) []int {
		v := args["r"]
		var rs []int
		if v == "all" {
			for r := range s.ag {
				if r != except && !s.dead[r] {
					rs = append(rs, r)
				}
			}
			return rs
		}
		for _, part := range strings.Split(v, ",") {
			lo, hi, isRange := strings.Cut(part, "-")
			a, err1 := strconv.Atoi(lo)
			z, err2 := a, error(nil)
			if isRange {
				z, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || a < 0 || z >= len(s.ag) || a > z {
				fail("bad ranks %q", v)
			}
			for r := a; r <= z; r++ {
				rs = append(rs, r)
			}
		}
		return rs
	}
	if s != nil {
		s.out = nil
	}
	switch fields[0] {
	case "new":
		n := num("n", -1)
		ns := &scriptNet{ag: make([]*Agreement, n), dead: make([]bool, n)}
		for r := range n {
			ns.ag[r] = New(r, n)
		}
		*sp = ns
		return nil
	case "start":
		v, err := strconv.ParseUint(strings.TrimPrefix(args["value"], "0x"), 16, 64)
		if err != nil {
			fail("value=%q: %v", args["value"], err)
		}
		for _, r := range ranks(-1) {
			s.ag[r].Start(uint64(num("inst", -1)), v)
			s.collect(r)
		}
	case "failed":
		x := num("of", -1)
		for _, r := range ranks(x) {
			s.ag[r].Failed(x)
			s.collect(r)
		}
	case "crash":
		x := num("r", -1)
		s.dead[x] = true
		if args["lose"] != "none" {
			s.fifo = slices.DeleteFunc(s.fifo, func(m scriptMsg) bool {
				if m.from == x {
					s.out = append(s.out, fmt.Sprintf("lost %d->%d: %v", m.from, m.to, m.msg))
				}
				return m.from == x
			})
		}
	case "deliver", "drop":
		from, to := num("from", -1), num("to", -1)
		for range num("n", 1) {
			i := slices.IndexFunc(s.fifo, func(m scriptMsg) bool { return m.from == from && m.to == to })
			if i < 0 {
				fail("no message in flight from %d to %d", from, to)
			}
			m := s.fifo[i]
			s.fifo = slices.Delete(s.fifo, i, i+1)
			if fields[0] == "drop" {
				s.out = append(s.out, fmt.Sprintf("lost %d->%d: %v", m.from, m.to, m.msg))
				continue
			}
			s.deliver(m)
		}
	case "stabilize":
		for steps := 0; len(s.fifo) > 0; steps++ {
			if steps > 10000 {
				fail("not stable after %d messages", steps)
			}
			m := s.fifo[0]
			s.fifo = s.fifo[1:]
			s.deliver(m)
		}
	case "pending":
		for _, m := range s.fifo {
			s.out = append(s.out, fmt.Sprintf("pending %d->%d: %v", m.from, m.to, m.msg))
		}
	default:
		fail("unknown command %q", fields[0])
	}
	return s.out
}

func (s *scriptNet) deliver(m scriptMsg) {
	if s.dead[m.to] {
		s.out = append(s.out, fmt.Sprintf("lost %d->%d: %v (%d is dead)", m.from, m.to, m.msg, m.to))
		return
	}
	s.out = append(s.out, fmt.Sprintf("recv %d->%d: %v", m.from, m.to, m.msg))
	s.ag[m.to].Step(m.from, m.msg)
	s.collect(m.to)
}

func (s *scriptNet) collect(r int) {
	a := s.ag[r]
	if !a.HasReady() {
		return
	}
	rd := a.Ready()
	a.Advance()
	for _, o := range rd.Send {
		// Through the codec, as the real runtime does.
		m, err := ParseMessage(o.Msg.AppendBinary(nil))
		if err != nil {
			panic(fmt.Sprintf("%v does not parse back: %v", o.Msg, err))
		}
		s.out = append(s.out, fmt.Sprintf("send %d->%d: %v", r, o.To, m))
		s.fifo = append(s.fifo, scriptMsg{from: r, to: o.To, msg: m})
	}
	for _, d := range rd.Decided {
		s.out = append(s.out, fmt.Sprintf("decide %d: inst=%d value=%#x failed=%v", r, d.Inst, d.Value, d.Failed))
	}
}
