// Package transporttest holds what the transports' tests share: the
// transport contract as one conformance suite (Run), which every transport's
// tests run against worlds of their own making, a receiver that records what
// it is given, and a log sink. It names no concrete transport.
package transporttest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// Recorder is a transport.Receiver that keeps what it is given.
type Recorder struct {
	// Hook, if set before the transport delivers anything, is called
	// with every message before it is recorded.
	Hook func(from ftrma.Rank, msg []byte)

	mu      sync.Mutex
	msgs    map[ftrma.Rank][][]byte
	n       int
	events  []string // "msg <from>" and "down <peer>", in arrival order
	downs   map[ftrma.Rank][]error
	changed chan struct{} // signalled (buffer of one) on every arrival
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{msgs: map[ftrma.Rank][][]byte{}, downs: map[ftrma.Rank][]error{}, changed: make(chan struct{}, 1)}
}

// HandleMessage records msg from from.
func (r *Recorder) HandleMessage(from ftrma.Rank, msg []byte) {
	if r.Hook != nil {
		r.Hook(from, msg)
	}
	r.mu.Lock()
	r.msgs[from] = append(r.msgs[from], slices.Clone(msg))
	r.n++
	r.events = append(r.events, fmt.Sprintf("msg %d", from))
	r.mu.Unlock()
	r.signal()
}

// HandlePeerDown records that peer went down with err.
func (r *Recorder) HandlePeerDown(peer ftrma.Rank, err error) {
	r.mu.Lock()
	r.downs[peer] = append(r.downs[peer], err)
	r.events = append(r.events, fmt.Sprintf("down %d", peer))
	r.mu.Unlock()
	r.signal()
}

func (r *Recorder) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Events lists what arrived, in order: "msg <from>" and "down <peer>".
func (r *Recorder) Events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Changed is signalled (a buffer of one) on every arrival.
func (r *Recorder) Changed() <-chan struct{} { return r.changed }

// Count is the number of messages received so far.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// From returns the messages received from p so far, in order.
func (r *Recorder) From(p ftrma.Rank) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs[p])
}

// DownsOf returns the peer-down events for p so far.
func (r *Recorder) DownsOf(p ftrma.Rank) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.downs[p])
}

// Await waits until cond holds, re-checking on every arrival and every few
// milliseconds, or fails the test when ctx ends.
func (r *Recorder) Await(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-r.changed:
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// LogSink records log lines: it is a slog.Handler (every level) whose
// records become lines in the runtime's text format (ftrma.NewLogHandler):
// the message, then the fields as key=value. Logger returns a logger on it,
// for a Config's Logger field.
type LogSink struct {
	mu    sync.Mutex // guards lines
	lines []string

	once sync.Once
	h    slog.Handler // the text handler writing to lines
}

var _ slog.Handler = (*LogSink)(nil)

// Logger returns a logger that records into l.
func (l *LogSink) Logger() *slog.Logger { return slog.New(l) }

func (l *LogSink) handler() slog.Handler {
	l.once.Do(func() {
		l.h = ftrma.NewLogHandler(sinkWriter{l}, ftrma.LogOptions{Level: slog.LevelDebug})
	})
	return l.h
}

// Enabled is true: every level is recorded.
func (l *LogSink) Enabled(context.Context, slog.Level) bool { return true }

// Handle records r as one line.
func (l *LogSink) Handle(ctx context.Context, r slog.Record) error { return l.handler().Handle(ctx, r) }

// WithAttrs returns a handler recording into l with the fields as.
func (l *LogSink) WithAttrs(as []slog.Attr) slog.Handler { return l.handler().WithAttrs(as) }

// WithGroup returns a handler recording into l under group name.
func (l *LogSink) WithGroup(name string) slog.Handler { return l.handler().WithGroup(name) }

// sinkWriter takes the text handler's lines.
type sinkWriter struct{ l *LogSink }

func (w sinkWriter) Write(b []byte) (int, error) {
	w.l.mu.Lock()
	w.l.lines = append(w.l.lines, strings.TrimSuffix(string(b), "\n"))
	w.l.mu.Unlock()
	return len(b), nil
}

// Contains reports whether a line contains s.
func (l *LogSink) Contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// String is every line, one per line.
func (l *LogSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
