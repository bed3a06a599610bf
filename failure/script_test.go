package failure

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/check/script"
)

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
//	    [await=true] [window=W]            (AwaitConfirmation, ProbeWindow)
//	    [absent=R,R,...]                   ranks that start absent
//	tick t=D                               Tick
//	heartbeat from=R t=D                   Heartbeat
//	probe from=R t=D                       Probe
//	failed r=R t=D                         Failed
//	admit r=R t=D                          Admit (prints "not absent" if false)
//	ticks from=D to=D every=D              Tick repeatedly
//
// After each command the output shows Ready (then acknowledged by Advance),
// if any, and the detector's state: whom it observes and when that rank's
// Timeout runs out, the ranks probed beyond it (with the deadline of each
// probe, "answered" or "reported"), whom it sends to and when the next
// heartbeat is due, and the failed ranks. Run with -rewrite to refresh the
// expected output after a deliberate change, and review the diff.
func TestScripts(t *testing.T) {
	script.RunDir(t, "testdata/*.txt", interpreter)
}

// interpreter runs one script's commands against one detector.
func interpreter() script.Interpreter {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var d *Detector
	return func(t *testing.T, c script.Command) []string {
		dur := func(key string) time.Duration { return c.Duration(t, key) }
		at := func(key string) time.Time { return epoch.Add(dur(key)) }
		if c.Name != "new" && d == nil {
			c.Failf(t, "%s before new", c.Name)
		}
		var out []string
		collect := func(now time.Duration) {
			if d.HasReady() {
				rd := d.Ready()
				line := fmt.Sprintf("%v: heartbeats=%v", now, fmtRanks(rd.Heartbeats))
				if len(rd.Probes) > 0 {
					line += " probes=" + fmtRanks(rd.Probes)
				}
				out = append(out, line+" suspected="+fmtRanks(rd.Suspected))
				d.Advance()
			}
		}
		switch c.Name {
		case "new":
			cfg := Config{Period: dur("period"), Timeout: dur("timeout"), ProbeWindow: c.Int(t, "window", 0)}
			cfg.AwaitConfirmation = c.Args["await"] == "true"
			var absent []int
			if a := c.Args["absent"]; a != "" {
				for _, f := range strings.Split(a, ",") {
					r, err := strconv.Atoi(f)
					if err != nil {
						c.Failf(t, "absent: %v", err)
					}
					absent = append(absent, r)
				}
			}
			nd, err := New(cfg, c.Int(t, "self", -1), c.Int(t, "n", -1), epoch, absent...)
			if err != nil {
				return []string{"error: " + err.Error()}
			}
			d = nd
			collect(0)
		case "tick":
			d.Tick(at("t"))
			collect(dur("t"))
		case "heartbeat":
			d.Heartbeat(c.Int(t, "from", -1), at("t"))
			collect(dur("t"))
		case "probe":
			d.Probe(c.Int(t, "from", -1), at("t"))
			collect(dur("t"))
		case "failed":
			d.Failed(c.Int(t, "r", -1), at("t"))
			collect(dur("t"))
		case "admit":
			if !d.Admit(c.Int(t, "r", -1), at("t")) {
				out = append(out, "not absent")
			}
			collect(dur("t"))
		case "ticks":
			for now := dur("from"); now <= dur("to"); now += dur("every") {
				d.Tick(epoch.Add(now))
				collect(now)
			}
		default:
			c.Failf(t, "unknown command %q", c.Name)
		}
		state := fmt.Sprintf("observed=%d", d.Observed())
		if d.Observed() >= 0 {
			state += fmt.Sprintf(" (suspect at %v)", d.watch[0].since.Add(d.cfg.Timeout).Sub(epoch))
		}
		if len(d.watch) > 1 {
			var ps []string
			for _, w := range d.watch[1:] {
				switch {
				case w.answered:
					ps = append(ps, fmt.Sprintf("%d answered", w.rank))
				case w.reported:
					ps = append(ps, fmt.Sprintf("%d reported", w.rank))
				default:
					ps = append(ps, fmt.Sprintf("%d until %v", w.rank, w.since.Add(d.cfg.Timeout).Sub(epoch)))
				}
			}
			state += " probing=[" + strings.Join(ps, ", ") + "]"
		}
		state += fmt.Sprintf(" observer=%d", d.Observer())
		if d.Observer() >= 0 {
			state += fmt.Sprintf(" (beat at %v)", d.beatDue.Sub(epoch))
		}
		state += " failed=" + fmtRanks(d.FailedRanks())
		var absent []int
		for r := range d.n {
			if d.IsAbsent(r) {
				absent = append(absent, r)
			}
		}
		if len(absent) > 0 {
			state += " absent=" + fmtRanks(absent)
		}
		return append(out, state)
	}
}

func fmtRanks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return "[" + strings.Join(s, " ") + "]"
}
