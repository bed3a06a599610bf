package ftrma_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ftrma/ftrma"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// logWith writes one debug and one warning line through a handler made from
// the environment env.
func logWith(t *testing.T, env map[string]string) string {
	t.Helper()
	o, err := ftrma.LogOptionsFromEnv(envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	l := slog.New(ftrma.NewLogHandler(&buf, o)).With(ftrma.LogRank, 3)
	l.Debug("tcp: a detail", ftrma.LogPeer, 1)
	l.Warn("tcp: lost rank 1: read: connection reset", ftrma.LogPeer, 1)
	return buf.String()
}

// The environment chooses the level: a debug line is dropped at the default
// (info) and at warn, and written at debug.
func TestLogLevelFromEnv(t *testing.T) {
	for _, c := range []struct {
		level     string
		wantDebug bool
	}{{"", false}, {"info", false}, {"warn", false}, {"DEBUG", true}, {"debug", true}} {
		out := logWith(t, map[string]string{ftrma.EnvLog: c.level})
		if got := strings.Contains(out, "a detail"); got != c.wantDebug {
			t.Errorf("%s=%q: debug line written %v, want %v:\n%s", ftrma.EnvLog, c.level, got, c.wantDebug, out)
		}
		if !strings.Contains(out, "lost rank 1") {
			t.Errorf("%s=%q: the warning is missing:\n%s", ftrma.EnvLog, c.level, out)
		}
	}
	out := logWith(t, map[string]string{ftrma.EnvLog: "error"})
	if out != "" {
		t.Errorf("at error: %q written", out)
	}
}

// Text lines keep the message as people read it, then the fields.
func TestLogTextFormat(t *testing.T) {
	out := logWith(t, nil)
	want := "tcp: lost rank 1: read: connection reset rank=3 peer=1 level=WARN\n"
	if out != want {
		t.Fatalf("text line %q, want %q", out, want)
	}
	var buf bytes.Buffer
	l := slog.New(ftrma.NewLogHandler(&buf, ftrma.LogOptions{Prefix: "ftrun agent: "}))
	l.WithGroup("g").Info("listening on 127.0.0.1:7", "why", "a b", "n", "")
	if got, want := buf.String(), "ftrun agent: listening on 127.0.0.1:7 g.why=\"a b\" g.n=\"\"\n"; got != want {
		t.Fatalf("text line %q, want %q", got, want)
	}
}

// The JSON format carries the rank and peer as fields.
func TestLogJSONFields(t *testing.T) {
	out := logWith(t, map[string]string{ftrma.EnvLogFormat: "json"})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want the warning only:\n%s", len(lines), out)
	}
	var rec struct {
		Level, Msg string
		Rank, Peer *int
	}
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("%v: %s", err, lines[0])
	}
	if rec.Level != "WARN" || !strings.Contains(rec.Msg, "lost rank 1") || rec.Rank == nil || *rec.Rank != 3 || rec.Peer == nil || *rec.Peer != 1 {
		t.Fatalf("record %+v from %s", rec, lines[0])
	}
}

func TestLogBadEnv(t *testing.T) {
	for _, env := range []map[string]string{{ftrma.EnvLog: "loud"}, {ftrma.EnvLogFormat: "xml"}} {
		_, err := ftrma.LogOptionsFromEnv(envOf(env))
		if !errors.Is(err, ftrma.ErrInvalid) {
			t.Fatalf("%v: %v", env, err)
		}
		for k := range env {
			if !strings.Contains(err.Error(), k) {
				t.Fatalf("%v: error %q does not name %s", env, err, k)
			}
		}
	}
}

func TestSetLogger(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(ftrma.NewLogHandler(&buf, ftrma.LogOptions{}))
	ftrma.SetLogger(l)
	defer ftrma.SetLogger(nil)
	if ftrma.Logger() != l {
		t.Fatal("Logger does not return the logger set")
	}
	ftrma.SetLogger(nil)
	if ftrma.Logger() == l || ftrma.Logger() == nil {
		t.Fatal("SetLogger(nil) does not restore the default")
	}
}
