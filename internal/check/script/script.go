// Package script runs the scenario scripts of the protocol packages' tests
// (failure/, agree/): text files of blocks
//
//	# comments and blank lines
//	command key=value ...
//	----
//	expected output lines
//
// separated by blank lines. A package supplies the meaning of the commands;
// this package parses the files, compares each block's output with the
// expected lines, and with -rewrite writes the actual output back for review.
package script

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

// Command is one command of a script.
type Command struct {
	File string            // the script's path
	Line int               // the command's line, 1-based
	Raw  string            // the command as written
	Name string            // its first word
	Args map[string]string // its key=value arguments
}

// Failf stops the test with the command's position and the message.
func (c Command) Failf(t testing.TB, format string, a ...any) {
	t.Helper()
	t.Fatalf("%s:%d: %s: %s", c.File, c.Line, c.Raw, fmt.Sprintf(format, a...))
}

// Int returns argument key as an integer, def when it is absent; a negative
// def makes the argument required.
func (c Command) Int(t testing.TB, key string, def int) int {
	t.Helper()
	v, ok := c.Args[key]
	if !ok {
		if def < 0 {
			c.Failf(t, "needs %s=", key)
		}
		return def
	}
	x, err := strconv.Atoi(v)
	if err != nil {
		c.Failf(t, "%s=%q: %v", key, v, err)
	}
	return x
}

// Duration returns argument key as a duration, 0 when it is absent.
func (c Command) Duration(t testing.TB, key string) time.Duration {
	t.Helper()
	v, ok := c.Args[key]
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		c.Failf(t, "%s=%q: %v", key, v, err)
	}
	return d
}

// An Interpreter runs the commands of one script, in order, and returns each
// command's output lines.
type Interpreter func(t *testing.T, c Command) []string

// RunDir runs every script matching glob (e.g. "testdata/*.txt") as a subtest,
// each with a fresh interpreter from newInterp.
func RunDir(t *testing.T, glob string, newInterp func() Interpreter) {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts match %s: %v", glob, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			Run(t, file, newInterp())
		})
	}
}

type block struct {
	pre  []string // comments and blank lines before the command
	cmd  string
	line int // of cmd, 1-based
	want []string
}

// Run runs one script file with interp.
func Run(t *testing.T, file string, interp Interpreter) {
	blocks := parse(t, file)
	for i := range blocks {
		b := &blocks[i]
		c := Command{File: file, Line: b.line, Raw: b.cmd, Args: map[string]string{}}
		fields := strings.Fields(b.cmd)
		c.Name = fields[0]
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				c.Failf(t, "argument %q is not key=value", f)
			}
			c.Args[k] = v
		}
		got := interp(t, c)
		if *rewrite {
			b.want = got
			continue
		}
		if strings.Join(got, "\n") != strings.Join(b.want, "\n") {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, b.line, b.cmd,
				strings.Join(got, "\n"), strings.Join(b.want, "\n"))
		}
	}
	if *rewrite {
		write(t, file, blocks)
	}
}

func parse(t *testing.T, file string) []block {
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
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if state == 1 {
		t.Fatalf("%s: command %q has no ----", file, cur.cmd)
	}
	if state == 2 {
		blocks = append(blocks, cur)
	}
	return blocks
}

func write(t *testing.T, file string, blocks []block) {
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
