package agree

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ftrma/ftrma/internal/check/script"
)

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
	script.RunDir(t, "testdata/*.txt", func() script.Interpreter {
		var net *scriptNet
		return func(t *testing.T, c script.Command) []string { return net.exec(t, c, &net) }
	})
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

func (s *scriptNet) exec(t *testing.T, c script.Command, sp **scriptNet) []string {
	args := c.Args
	fail := func(format string, a ...any) {
		t.Helper()
		c.Failf(t, format, a...)
	}
	num := func(key string, def int) int {
		t.Helper()
		return c.Int(t, key, def)
	}
	if c.Name != "new" && s == nil {
		fail("%s before new", c.Name)
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
	switch c.Name {
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
			if c.Name == "drop" {
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
		fail("unknown command %q", c.Name)
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
