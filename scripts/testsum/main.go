// Command testsum turns the event stream of "go test -json" (standard
// input) into what scripts/test.sh shows and counts:
//
//   - on standard output, go test's own terse report: a line per package
//     ("ok", "FAIL", "?"), and the whole output of every test that failed,
//     and, for a package that failed outside its tests (a build error, a
//     panic, a timeout), the package's own output and that of the tests
//     still running: never a bare FAIL;
//   - with -o FILE, a summary for the script, one item a line, tab-separated:
//     "package PKG ok|FAIL|none PASSED FAILED SKIPPED" (top-level tests),
//     "notrun PKG TEST REASON" for each test skipped with "NOT RUN: REASON"
//     (a suite that cannot run on this machine), and, with -suite S,
//     "suite PKG TEST pass|fail|skip" for each top-level test whose output
//     names S (how a suite marks its tests).
//
// It exits 1 if a test or package failed, else 0.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

// test is what testsum keeps of one test: its output until it ends.
type test struct {
	out    strings.Builder
	result string // pass, fail, skip; "" while it runs
	notrun string // the reason of a skip that says "NOT RUN: REASON"
	suite  bool   // its output names the suite (-suite)
}

// pkg is what testsum keeps of one package.
type pkg struct {
	out    strings.Builder // the package's own output (no test's)
	tests  map[string]*test
	order  []string
	result string
}

func main() {
	summary := flag.String("o", "", "write the script's summary to this file")
	suite := flag.String("suite", "", "the text by which a suite's tests say they belong to it")
	flag.Parse()
	s := &state{pkgs: map[string]*pkg{}, w: bufio.NewWriter(os.Stdout), suite: *suite}
	err := s.read(os.Stdin)
	s.w.Flush()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if *summary != "" {
		if err := os.WriteFile(*summary, []byte(s.summary()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			os.Exit(2)
		}
	}
	if s.failed {
		os.Exit(1)
	}
}

type state struct {
	suite  string // -suite
	pkgs   map[string]*pkg
	order  []string
	w      *bufio.Writer
	failed bool
}

func (s *state) pkg(name string) *pkg {
	p := s.pkgs[name]
	if p == nil {
		p = &pkg{tests: map[string]*test{}}
		s.pkgs[name] = p
		s.order = append(s.order, name)
	}
	return p
}

// read handles the events of r until it ends. Lines that are not events
// (go test's own complaints) are passed on as they are.
func (s *state) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			s.w.Write(line)
			s.w.WriteByte('\n')
			s.w.Flush()
			continue
		}
		s.handle(e)
	}
	return sc.Err()
}

func (s *state) handle(e event) {
	switch e.Action {
	case "build-output":
		s.w.WriteString(e.Output)
		return
	case "build-fail":
		s.failed = true
		return
	}
	if e.Package == "" {
		return
	}
	p := s.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.out.WriteString(e.Output)
		case "pass", "skip":
			p.result = e.Action
			s.printPackageLine(p)
		case "fail":
			p.result = "fail"
			s.failed = true
			// Whatever the package said, and the tests that were
			// still running (a timeout, a panic): where it failed.
			for _, name := range p.order {
				if t := p.tests[name]; t.result == "" {
					s.w.WriteString(t.out.String())
				}
			}
			s.w.WriteString(p.out.String())
		}
		s.w.Flush()
		return
	}
	t := p.tests[e.Test]
	if t == nil {
		t = &test{}
		p.tests[e.Test] = t
		p.order = append(p.order, e.Test)
	}
	switch e.Action {
	case "output":
		t.out.WriteString(e.Output)
		return
	case "pass", "skip":
		t.result = e.Action
	case "fail":
		t.result = "fail"
		s.w.WriteString(t.out.String())
		s.w.Flush()
	default:
		return
	}
	// The test ended: keep what the summary needs of its output, not all.
	out := t.out.String()
	if _, reason, ok := strings.Cut(out, "NOT RUN: "); ok && t.result == "skip" {
		reason, _, _ = strings.Cut(reason, "\n")
		t.notrun = strings.TrimSpace(reason)
	}
	t.suite = s.suite != "" && strings.Contains(out, s.suite)
	t.out = strings.Builder{}
}

// printPackageLine prints go test's line for a package that passed or has
// no tests ("ok ...", "? ...").
func (s *state) printPackageLine(p *pkg) {
	for _, l := range strings.SplitAfter(p.out.String(), "\n") {
		if strings.HasPrefix(l, "ok  ") || strings.HasPrefix(l, "?   ") {
			s.w.WriteString(l)
		}
	}
}

// summary is the -o file's text.
func (s *state) summary() string {
	var b strings.Builder
	for _, name := range s.order {
		p := s.pkgs[name]
		var passed, failed, skipped int
		var notrun []string
		for _, tn := range p.order {
			t := p.tests[tn]
			top := !strings.Contains(tn, "/")
			if top {
				switch t.result {
				case "pass":
					passed++
				case "skip":
					skipped++
				default: // failed, or never ended
					failed++
				}
			}
			if t.notrun != "" {
				notrun = append(notrun, fmt.Sprintf("notrun\t%s\t%s\t%s\n", name, tn, t.notrun))
			}
			if top && (t.suite || t.result == "" && s.suite != "" && strings.Contains(t.out.String(), s.suite)) {
				r := t.result
				if r == "" {
					r = "fail"
				}
				fmt.Fprintf(&b, "suite\t%s\t%s\t%s\n", name, tn, r)
			}
		}
		result := map[string]string{"pass": "ok", "fail": "FAIL", "skip": "none", "": "FAIL"}[p.result]
		fmt.Fprintf(&b, "package\t%s\t%s\t%d\t%d\t%d\n", name, result, passed, failed, skipped)
		sort.Strings(notrun)
		for _, l := range notrun {
			b.WriteString(l)
		}
	}
	return b.String()
}
