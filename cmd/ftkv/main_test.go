package main

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

// runFtkv runs ftkv in-process and returns its exit status and output.
func runFtkv(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

// Help, however asked for, goes to stdout with exit status 0; the top-level
// text names every command.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{
		{}, {"-h"}, {"-help"}, {"--help"}, {"help"},
		{"help", "bench"}, {"bench", "-h"}, {"bench", "--help"},
		{"serve", "-h"}, {"put", "-h"}, {"get", "--help"}, {"del", "-h"}, {"stop", "-h"},
		{"ls", "-h"}, {"len", "-h"}, {"cas", "-h"}, {"help", "ls"},
		{"get", "--socket", "x", "-h"},
	} {
		code, out, errOut := runFtkv(args...)
		if code != 0 || out == "" || errOut != "" {
			t.Errorf("ftkv %q: exit %d, %d bytes on stdout, stderr %q; want 0, help, nothing", args, code, len(out), errOut)
		}
	}
	_, out, _ := runFtkv("--help")
	for name := range commands {
		if !strings.Contains(out, "ftkv "+name+" ") {
			t.Errorf("the usage does not list %q:\n%s", name, out)
		}
	}
	_, out, _ = runFtkv("bench", "-h")
	for _, f := range []string{"-copies", "-size", "-ops", "-json", "-timeout"} {
		if !strings.Contains(out, f) {
			t.Errorf("bench -h does not list %s:\n%s", f, out)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"frob"}, {"--copies", "3"}, {"help", "frob"}, {"list"}} {
		code, out, errOut := runFtkv(args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "unknown command") || !strings.Contains(errOut, "usage: ftkv") {
			t.Errorf("ftkv %q: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr", args, code, out, errOut)
		}
	}
}

// Flag values that make no sense are refused with exit status 2 and a
// message naming the flag, before anything starts: outside ftrun, a command
// that went on would fail to join the job with status 1 instead.
func TestFlagValidation(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // in the message
	}{
		{[]string{"bench", "--copies", "0"}, "--copies"},
		{[]string{"bench", "--copies=-2"}, "--copies"},
		{[]string{"bench", "--copies", "two"}, "copies"},
		{[]string{"bench", "--size", "0"}, "--size"},
		{[]string{"bench", "--size", "2000000000"}, "--size"},
		{[]string{"bench", "--ops", "0"}, "--ops"},
		{[]string{"bench", "--keys", "0"}, "--keys"},
		{[]string{"bench", "--warmup", "-1"}, "--warmup"},
		{[]string{"bench", "--gets", "-1"}, "--gets"},
		{[]string{"bench", "--writers", "-1"}, "--writers"},
		{[]string{"bench", "--timeout", "0s"}, "--timeout"},
		{[]string{"bench", "extra"}, "extra"},
		{[]string{"bench", "--nope"}, "nope"},
		{[]string{"serve"}, "--socket"},
		{[]string{"serve", "--socket", "s", "--copies", "0"}, "--copies"},
		{[]string{"serve", "--socket", "s", "--max-value", "0"}, "--max-value"},
		{[]string{"serve", "--socket", "s", "--request-timeout", "-1s"}, "--request-timeout"},
		{[]string{"serve", "--socket", "s", "x"}, "x"},
		{[]string{"put", "--socket", "s", "k"}, "KEY VALUE"},
		{[]string{"put", "k", "v"}, "--socket"},
		{[]string{"get", "--socket", "s"}, "KEY"},
		{[]string{"get", "--socket", "s", "a", "b"}, "KEY"},
		{[]string{"get", "--socket", "s", ""}, "empty"},
		{[]string{"get", "--socket", "s", strings.Repeat("k", maxKey+1)}, "key"},
		{[]string{"get", "--socket", "s", "--timeout", "0s", "k"}, "--timeout"},
		{[]string{"del", "--socket", "s"}, "KEY"},
		{[]string{"stop", "--socket", "s", "k"}, "no arguments"},
		{[]string{"stop"}, "--socket"},
		{[]string{"len", "--socket", "s", "k"}, "no arguments"},
		{[]string{"ls", "--socket", "s", "a", "b"}, "PREFIX"},
		{[]string{"ls", "--socket", "s", "--limit", "-1"}, "--limit"},
		{[]string{"ls", "--socket", "s", "--after", `"a`}, "--after"},
		{[]string{"ls", "--socket", "s", `"\q"`}, "PREFIX"},
		{[]string{"ls", "--socket", "s", strings.Repeat("p", maxKey+1)}, "at most"},
		{[]string{"ls", "--version"}, "version"}, // a flag of get only
		{[]string{"cas", "--socket", "s", "k", "old"}, "KEY OLD NEW"},
		{[]string{"cas", "--socket", "s", "--delete", "k", "old", "new"}, "KEY OLD"},
		{[]string{"cas", "--socket", "s", "--delete", "k", "-"}, "--delete"},
		{[]string{"cas", "--socket", "s", "", "a", "b"}, "empty"},
		{[]string{"put", "--socket", "s", "--if-absent", "--if-version", "1", "k", "v"}, "exclude"},
		{[]string{"put", "--socket", "s", "--if-version", "-1", "k", "v"}, "version"},
		{[]string{"put", "--socket", "s", "--if-version", "x", "k", "v"}, "version"},
		{[]string{"del", "--socket", "s", "--if-version", "0", "k"}, "at least 1"},
		{[]string{"del", "--socket", "s", "--if-absent", "k"}, "if-absent"},
	} {
		code, out, errOut := runFtkv(c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("ftkv %q: exit %d, stdout %q, stderr %q; want 2 and a message with %q", c.args, code, out, errOut, c.want)
		}
	}
}

func TestCopiesResolve(t *testing.T) {
	for _, c := range []struct {
		args      []string
		size      int
		want      int
		wantUsage bool
	}{
		{nil, 8, 3, false},
		{nil, 2, 2, false}, // the default shrinks to a small job
		{[]string{"--copies", "1"}, 4, 1, false},
		{[]string{"--copies", "4"}, 4, 4, false},
		{[]string{"--copies", "5"}, 4, 0, true}, // asked for: refused, not shrunk
	} {
		var o benchOptions
		if err := benchFlags(&o).Parse(c.args); err != nil {
			t.Fatal(err)
		}
		got, err := o.copies.resolve(c.size)
		if got != c.want || errors.Is(err, errUsage) != c.wantUsage || (err != nil) != c.wantUsage {
			t.Errorf("%q with %d ranks: %d, %v; want %d (usage error %v)", c.args, c.size, got, err, c.want, c.wantUsage)
		}
	}
}

// Flags may come between and after the arguments; after "--" everything is
// an argument.
func TestParseFlagsInterspersed(t *testing.T) {
	for _, c := range []struct {
		args       []string
		wantRest   []string
		wantSocket string
	}{
		{[]string{"--socket", "p", "k", "v"}, []string{"k", "v"}, "p"},
		{[]string{"k", "--socket", "p", "v"}, []string{"k", "v"}, "p"},
		{[]string{"k", "v", "--socket=p"}, []string{"k", "v"}, "p"},
		{[]string{"--socket", "p", "k", "-"}, []string{"k", "-"}, "p"},
		{[]string{"--socket", "p", "--", "-k", "--socket"}, []string{"-k", "--socket"}, "p"},
	} {
		var o clientOptions
		var out, errOut bytes.Buffer
		rest, code, done := parseFlags(clientFlags("put", &o), c.args, "", &out, &errOut)
		if done || code != 0 || !slices.Equal(rest, c.wantRest) || o.socket != c.wantSocket {
			t.Errorf("%q: rest %q, socket %q, done %v (%s); want %q, %q", c.args, rest, o.socket, done, errOut.String(), c.wantRest, c.wantSocket)
		}
	}
	var o clientOptions
	if _, code, done := parseFlags(clientFlags("put", &o), []string{"k", "-x"}, "", new(bytes.Buffer), new(bytes.Buffer)); !done || code != 2 {
		t.Errorf("an unknown flag after an argument: done %v, code %d; want a usage error", done, code)
	}
}

// Every key ls prints reads back, through --after or PREFIX, as itself;
// plain printable text is printed as it is, anything else quoted, so that a
// line is one key.
func TestPrintKeyRoundTrip(t *testing.T) {
	for _, c := range []struct {
		key, printed string
	}{
		{"task/17", "task/17"},
		{"with space", "with space"},
		{"ünïcødé/日本", "ünïcødé/日本"},
		{"-x", "-x"},
		{"a\"b", "a\"b"}, // a quote inside is fine
		{"\"quoted\"", `"\"quoted\""`},
		{"line\nbreak", `"line\nbreak"`},
		{"tab\there", `"tab\there"`},
		{"nul\x00", `"nul\x00"`},
		{"\xff\xfe", `"\xff\xfe"`},
		{"\u00a0nbsp", `"\u00a0nbsp"`},
		{"cr\r", `"cr\r"`},
	} {
		got := printKey([]byte(c.key))
		if got != c.printed {
			t.Errorf("printKey(%q) = %s, want %s", c.key, got, c.printed)
		}
		if strings.ContainsAny(got, "\n\r") {
			t.Errorf("printKey(%q) = %q spans lines", c.key, got)
		}
		back, err := keyArg(got)
		if err != nil || string(back) != c.key {
			t.Errorf("keyArg(%s) = %q, %v; want %q", got, back, err, c.key)
		}
	}
	for _, s := range []string{`"unterminated`, `"\q"`, `"a" "b"`} {
		if _, err := keyArg(s); err == nil {
			t.Errorf("keyArg(%s) accepted", s)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"task/17":   "task/17",
		"a b":       "'a b'",
		"it's":      `'it'\''s'`,
		`"a\x00"`:   `'"a\x00"'`,
		"$HOME":     "'$HOME'",
		"k-1_2.3:4": "k-1_2.3:4",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// Whatever the key's bytes, ls prints it on one line, and the line reads back
// as the key.
func FuzzPrintKey(f *testing.F) {
	for _, k := range []string{"task/17", "a\nb", `"x"`, "\x00", "\xff", "\u2028", "é\u0301"} {
		f.Add([]byte(k))
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		if len(key) == 0 {
			return // keys are never empty
		}
		p := printKey(key)
		if strings.ContainsAny(p, "\n\r") {
			t.Fatalf("%q prints as %q, over lines", key, p)
		}
		if back, err := keyArg(p); err != nil || !bytes.Equal(back, key) {
			t.Fatalf("%q prints as %s, which reads back as %q, %v", key, p, back, err)
		}
	})
}
