package launcher

import (
	"bytes"
	"flag"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma/internal/jobwire"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want *Config // nil: want an error
		err  string  // substring of the error
	}{
		{name: "minimal", args: []string{"-n", "4", "prog"},
			want: &Config{N: 4, Prog: "prog", Args: []string{}}},
		{name: "too many ranks", args: []string{"-n", "2000000000", "prog"}, err: "at most 1048576 ranks"},
		{name: "too many spares", args: []string{"-n", "2", "--respawn=2000000000", "prog"}, err: "at most 1048576 ranks"},
		{name: "too many ranks on one host", args: []string{"-n", "4", "--hosts", "local:2,h2:7770:2000000000", "prog"}, err: "rank count"},
		{name: "double dash and equals", args: []string{"--n=2", "--tag-output", "prog", "a", "b"},
			want: &Config{N: 2, TagOutput: true, Prog: "prog", Args: []string{"a", "b"}}},
		{name: "flags after the program are the program's", args: []string{"-n", "2", "prog", "-n", "3", "--kill", "x"},
			want: &Config{N: 2, Prog: "prog", Args: []string{"-n", "3", "--kill", "x"}}},
		{name: "double dash ends flags", args: []string{"-n", "1", "--", "-prog"},
			want: &Config{N: 1, Prog: "-prog", Args: []string{}}},
		{name: "kills and timeout", args: []string{"-n", "4", "--kill", "3@1s", "--kill=0@250ms", "--timeout", "1m", "prog"},
			want: &Config{N: 4, Kills: []KillSpec{{3, time.Second}, {0, 250 * time.Millisecond}}, Timeout: time.Minute, Prog: "prog", Args: []string{}}},
		{name: "kill at zero", args: []string{"-n", "1", "--kill", "0@0s", "prog"},
			want: &Config{N: 1, Kills: []KillSpec{{0, 0}}, Prog: "prog", Args: []string{}}},
		{name: "spin", args: []string{"-n", "2", "--spin", "20us", "prog"},
			want: &Config{N: 2, Spin: 20 * time.Microsecond, Prog: "prog", Args: []string{}}},
		{name: "detector settings", args: []string{"-n", "2", "--hb-period", "100ms", "--hb-timeout", "300ms", "--no-ft", "prog"},
			want: &Config{N: 2, HBPeriod: 100 * time.Millisecond, HBTimeout: 300 * time.Millisecond, NoFT: true, Prog: "prog", Args: []string{}}},
		{name: "no spin", args: []string{"-n", "2", "--spin=-1ns", "prog"},
			want: &Config{N: 2, Spin: -1, Prog: "prog", Args: []string{}}},
		{name: "injections", args: []string{"-n", "4", "--pause", "2@500ms:3s", "--pause=0@0s:20ms", "--kill-host", "h2@1s",
			"--cut", "h3@1s", "--cut", "node4:7770@0s:2s", "prog"},
			want: &Config{N: 4, Pauses: []PauseSpec{{2, 500 * time.Millisecond, 3 * time.Second}, {0, 0, 20 * time.Millisecond}},
				KillHosts: []KillHostSpec{{"h2", time.Second}}, Cuts: []CutSpec{{"h3", time.Second, 0}, {"node4:7770", 0, 2 * time.Second}},
				Prog: "prog", Args: []string{}}},
		{name: "injections with --no-ft", args: []string{"--no-ft", "-H", "a:1,b:1", "--kill-host", "b@0s", "prog"},
			want: &Config{NoFT: true, HostList: "a:1,b:1", KillHosts: []KillHostSpec{{"b", 0}}, Prog: "prog", Args: []string{}}},
		{name: "no arbiter", args: []string{"-n", "2", "--no-arbiter", "prog"},
			want: &Config{N: 2, NoArbiter: true, Prog: "prog", Args: []string{}}},
		{name: "help", args: []string{"--help"}, want: &Config{Help: true}},
		{name: "short help", args: []string{"-h"}, want: &Config{Help: true}},
		{name: "version", args: []string{"--version"}, want: &Config{Version: true}},

		{name: "missing -n", args: []string{"prog"}, err: "-n N is required"},
		{name: "nothing", args: nil, err: "-n N is required"},
		{name: "zero ranks", args: []string{"-n", "0", "prog"}, err: "at least 1"},
		{name: "negative ranks", args: []string{"-n", "-2", "prog"}, err: "at least 1"},
		{name: "n not a number", args: []string{"-n", "four", "prog"}, err: "invalid value"},
		{name: "no program", args: []string{"-n", "2"}, err: "no program"},
		{name: "unknown flag", args: []string{"-n", "2", "--bogus", "prog"}, err: "not defined"},
		{name: "arbiter both ways", args: []string{"-n", "2", "--arbiter", "--no-arbiter", "prog"}, err: "--arbiter and --no-arbiter"},
		{name: "kill without @", args: []string{"-n", "2", "--kill", "1", "prog"}, err: "RANK@DURATION"},
		{name: "kill bad rank", args: []string{"-n", "2", "--kill", "x@1s", "prog"}, err: "rank"},
		{name: "kill negative rank", args: []string{"-n", "2", "--kill", "-1@1s", "prog"}, err: "rank"},
		{name: "kill no duration", args: []string{"-n", "2", "--kill", "1@", "prog"}, err: "duration"},
		{name: "kill bad duration", args: []string{"-n", "2", "--kill", "1@soon", "prog"}, err: "duration"},
		{name: "kill negative duration", args: []string{"-n", "2", "--kill", "1@-1s", "prog"}, err: "duration"},
		{name: "kill rank out of range", args: []string{"-n", "2", "--kill", "2@1s", "prog"}, err: "no rank 2"},
		{name: "pause without duration", args: []string{"-n", "4", "--pause", "2@1s", "prog"}, err: "RANK@T:D"},
		{name: "pause without @", args: []string{"-n", "4", "--pause", "2", "prog"}, err: "RANK@T:D"},
		{name: "pause of 0", args: []string{"-n", "4", "--pause", "2@1s:0s", "prog"}, err: "pause of 0"},
		{name: "pause negative", args: []string{"-n", "4", "--pause", "2@1s:-1s", "prog"}, err: "non-negative duration"},
		{name: "pause negative start", args: []string{"-n", "4", "--pause", "2@-1s:1s", "prog"}, err: "non-negative duration"},
		{name: "pause bad rank", args: []string{"-n", "4", "--pause", "two@1s:1s", "prog"}, err: "rank"},
		{name: "pause rank out of range", args: []string{"-n", "4", "--pause", "4@1s:1s", "prog"}, err: "no rank 4 in a job of 4"},
		{name: "kill-host without @", args: []string{"-n", "4", "--kill-host", "h2", "prog"}, err: "HOST@T"},
		{name: "kill-host without host", args: []string{"-n", "4", "--kill-host", "@1s", "prog"}, err: "not a host name"},
		{name: "kill-host negative", args: []string{"-n", "4", "--kill-host", "h2@-1s", "prog"}, err: "non-negative duration"},
		{name: "kill-host with heal", args: []string{"-n", "4", "--kill-host", "h2@1s:2s", "prog"}, err: "non-negative duration"},
		{name: "cut without @", args: []string{"-n", "4", "--cut", "h3", "prog"}, err: "HOST@T[:HEAL]"},
		{name: "cut bad time", args: []string{"-n", "4", "--cut", "h3@soon", "prog"}, err: "non-negative duration"},
		{name: "cut heal of 0", args: []string{"-n", "4", "--cut", "h3@1s:0s", "prog"}, err: "HEAL > 0"},
		{name: "cut negative heal", args: []string{"-n", "4", "--cut", "h3@1s:-2s", "prog"}, err: "non-negative duration"},
		{name: "cut host with a space", args: []string{"-n", "4", "--cut", "h 3@1s", "prog"}, err: "not a host name"},
		{name: "negative timeout", args: []string{"-n", "2", "--timeout", "-1s", "prog"}, err: "negative"},
		{name: "bad timeout", args: []string{"-n", "2", "--timeout", "5", "prog"}, err: "invalid value"},
		{name: "bad spin", args: []string{"-n", "2", "--spin", "fast", "prog"}, err: "invalid value"},
		{name: "timeout below default period", args: []string{"-n", "2", "--hb-timeout", "10ms", "prog"}, err: "must exceed"},
		{name: "timeout below period", args: []string{"-n", "2", "--hb-period", "50ms", "--hb-timeout", "40ms", "prog"}, err: "must exceed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.args)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("ParseArgs(%q) = %+v, want an error containing %q", tt.args, got, tt.err)
				}
				if !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseArgs(%q) error %q, want it to contain %q", tt.args, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", tt.args, err)
			}
			if tt.want.Stdin == "" {
				tt.want.Stdin = "0" // the command line's default, as mpirun's
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseArgs(%q) = %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}
}

func TestKillSpecString(t *testing.T) {
	for _, s := range []string{"3@1s", "0@250ms", "12@1m30s"} {
		k, err := ParseKillSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		if k.String() != s {
			t.Errorf("ParseKillSpec(%q).String() = %q", s, k.String())
		}
	}
}

func TestInjectSpecString(t *testing.T) {
	for _, s := range []string{"2@500ms:3s", "0@0s:20ms"} {
		if p, err := ParsePauseSpec(s); err != nil || p.String() != s {
			t.Errorf("ParsePauseSpec(%q) = %v, %v", s, p, err)
		}
	}
	for _, s := range []string{"h2@1s", "node4:7770@0s"} {
		if k, err := ParseKillHostSpec(s); err != nil || k.String() != s {
			t.Errorf("ParseKillHostSpec(%q) = %v, %v", s, k, err)
		}
	}
	for _, s := range []string{"h3@1s", "h3@1s:2s", "[::1]:7770@1m0s:500ms"} {
		if c, err := ParseCutSpec(s); err != nil || c.String() != s {
			t.Errorf("ParseCutSpec(%q) = %v, %v", s, c, err)
		}
	}
	if _, err := ParseCutSpec("h3"); err == nil || !strings.HasPrefix(err.Error(), `--cut "h3": `) {
		t.Errorf("ParseCutSpec(h3): %v", err)
	}
}

// The help text documents every flag and every exit status.
func TestUsageDocumentsEverything(t *testing.T) {
	newFlagSet(new(Config)).VisitAll(func(f *flag.Flag) {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		if !regexp.MustCompile(`\s` + regexp.QuoteMeta(dash+f.Name) + `[ ,\n]`).MatchString(Usage) {
			t.Errorf("Usage does not document %s%s", dash, f.Name)
		}
	})
	for _, code := range []string{"0 ", "1 ", "2 ", "3 ", "4 ", "128+"} {
		if !strings.Contains(Usage, "\n  "+code) {
			t.Errorf("Usage does not document exit status %q", code)
		}
	}
	for _, env := range []string{jobwire.EnvRank, jobwire.EnvSize, jobwire.EnvRendezvous, jobwire.EnvSecret, jobwire.EnvJob, jobwire.EnvLocalSize} {
		if !strings.Contains(Usage, env) {
			t.Errorf("Usage does not document %s", env)
		}
	}
}

func TestMainWithoutJob(t *testing.T) {
	tests := []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"--help"}, ExitOK, "usage: ftrun", ""},
		{[]string{"--version"}, ExitOK, Version + "\n", ""},
		{[]string{"prog"}, ExitUsage, "", "Run 'ftrun --help'"},
		{[]string{"-n", "1", "--kill", "1@1s", "prog"}, ExitUsage, "", "no rank 1"},
		{[]string{"-n", "1", "./does-not-exist-ftrun-test"}, ExitLaunch, "", "does-not-exist"},
	}
	for _, tt := range tests {
		var out, errs bytes.Buffer
		code := Main(tt.args, &out, &errs)
		if code != tt.code || !strings.Contains(out.String(), tt.out) || !strings.Contains(errs.String(), tt.errs) {
			t.Errorf("Main(%q) = %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, out.String(), errs.String(), tt.code, tt.out, tt.errs)
		}
	}
}

// --respawn alone asks for as many spares as ranks (-1 until N is known);
// --respawn=S for S; a bad count is a usage error.
func TestParseRespawn(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"-n", "2", "prog"}, 0},
		{[]string{"-n", "2", "--respawn", "prog"}, -1},
		{[]string{"-n", "2", "--respawn=3", "prog", "--respawn=1"}, 3},
		{[]string{"-n", "2", "--respawn=0", "prog"}, 0},
	} {
		o, err := ParseArgs(tt.args)
		if err != nil || o.Spares != tt.want || o.Prog != "prog" {
			t.Errorf("ParseArgs(%q): %+v, %v; want Spares %d", tt.args, o, err, tt.want)
		}
	}
	for _, bad := range []string{"--respawn=-1", "--respawn=two"} {
		if _, err := ParseArgs([]string{"-n", "2", bad, "prog"}); err == nil {
			t.Errorf("ParseArgs(%s) accepted", bad)
		}
	}
}
