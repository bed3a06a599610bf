package ftrma

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
)

// The environment variables that choose the runtime's log (see Logger).
// ftrun passes them on to its ranks, and "ftrun -v" sets EnvLog to debug
// for them when it is not set.
const (
	// EnvLog is the lowest level logged: debug, info (the default), warn
	// or error.
	EnvLog = "FTRMA_LOG"
	// EnvLogFormat is the format of log lines: text (the default: the
	// message, then its fields as key=value, then level=LEVEL unless it
	// is INFO) or json (one slog JSON object a line, with time and level).
	EnvLogFormat = "FTRMA_LOG_FORMAT"
)

// Field names the runtime's log lines use for their structured fields.
const (
	LogRank = "rank" // this process's rank
	LogPeer = "peer" // the other rank a line is about
	LogJob  = "job"  // the job id
)

// LogOptions say how NewLogHandler writes.
type LogOptions struct {
	// Level is the lowest level written; nil means slog.LevelInfo.
	Level slog.Leveler
	// JSON selects slog's JSON format instead of text lines.
	JSON bool
	// Prefix starts every text line, before the message (e.g. "ftrun
	// agent: "). JSON lines ignore it.
	Prefix string
}

// LogOptionsFromEnv reads EnvLog and EnvLogFormat through getenv (os.Getenv
// when nil). Unset or empty variables mean info and text. An unknown value
// fails with an error wrapping ErrInvalid that names the variable; the
// options returned then hold the defaults for it.
func LogOptionsFromEnv(getenv func(string) string) (LogOptions, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var o LogOptions
	var errs []string
	switch v := strings.ToLower(strings.TrimSpace(getenv(EnvLog))); v {
	case "", "info":
		o.Level = slog.LevelInfo
	case "debug":
		o.Level = slog.LevelDebug
	case "warn", "warning":
		o.Level = slog.LevelWarn
	case "error":
		o.Level = slog.LevelError
	default:
		o.Level = slog.LevelInfo
		errs = append(errs, fmt.Sprintf("%s=%q: want debug, info, warn or error", EnvLog, v))
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv(EnvLogFormat))); v {
	case "", "text":
	case "json":
		o.JSON = true
	default:
		errs = append(errs, fmt.Sprintf("%s=%q: want text or json", EnvLogFormat, v))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(errs, "; "))
	}
	return o, nil
}

// NewLogHandler returns a handler that writes one line a record to w, as o
// says. Writes are serialized, also across the handlers WithAttrs and
// WithGroup derive from it.
func NewLogHandler(w io.Writer, o LogOptions) slog.Handler {
	if o.Level == nil {
		o.Level = slog.LevelInfo
	}
	if o.JSON {
		return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: o.Level})
	}
	return &textHandler{mu: new(sync.Mutex), w: w, level: o.Level, prefix: o.Prefix}
}

// The default logger: set by SetLogger, or made from the environment on
// first use.
var (
	defaultLogger atomic.Pointer[slog.Logger]
	envLoggerOnce sync.Once
	envLogger     *slog.Logger
)

// Logger returns the runtime's logger, which every package of ftrma logs to
// unless its Config names another: the one SetLogger set, or else one made
// on first use from EnvLog and EnvLogFormat that writes to standard error.
// A bad value of those variables is reported once on that logger, which
// then uses the defaults for it.
func Logger() *slog.Logger {
	if l := defaultLogger.Load(); l != nil {
		return l
	}
	envLoggerOnce.Do(func() {
		o, err := LogOptionsFromEnv(nil)
		envLogger = slog.New(NewLogHandler(os.Stderr, o))
		if err != nil {
			envLogger.Warn("ftrma: ignoring a bad log setting", "err", err)
		}
	})
	return envLogger
}

// SetLogger makes l the logger Logger returns; nil restores the one made
// from the environment. Loggers already handed out (the transports keep
// theirs from Open) do not change.
func SetLogger(l *slog.Logger) { defaultLogger.Store(l) }

// textHandler writes "prefix message key=value ... level=LEVEL" lines:
// the message reads as the runtime's log lines always did, and the level is
// named only when it is not INFO.
type textHandler struct {
	mu     *sync.Mutex // shared with derived handlers; serializes writes to w
	w      io.Writer
	level  slog.Leveler
	prefix string
	attrs  []byte // the fields of WithAttrs, formatted
	group  string // the groups of WithGroup, each followed by a dot
}

func (h *textHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *textHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]byte(nil), h.attrs...)
	for _, a := range as {
		c.attrs = appendAttr(c.attrs, h.group, a)
	}
	return &c
}

func (h *textHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	b := make([]byte, 0, 128)
	b = append(b, h.prefix...)
	b = append(b, r.Message...)
	b = append(b, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		b = appendAttr(b, h.group, a)
		return true
	})
	if r.Level != slog.LevelInfo {
		b = append(b, " level="...)
		b = append(b, r.Level.String()...)
	}
	b = append(b, '\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b)
	return err
}

// appendAttr appends " group.key=value" (the value quoted if needed; the
// fields of a group value each so).
func appendAttr(b []byte, group string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return b
	}
	if a.Value.Kind() == slog.KindGroup {
		g := group
		if a.Key != "" {
			g += a.Key + "."
		}
		for _, s := range a.Value.Group() {
			b = appendAttr(b, g, s)
		}
		return b
	}
	b = append(b, ' ')
	b = append(b, group...)
	b = append(b, a.Key...)
	b = append(b, '=')
	v := a.Value.String()
	if needsQuote(v) {
		return strconv.AppendQuote(b, v)
	}
	return append(b, v...)
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, c := range s {
		if c == '"' || c == '=' || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return true
		}
	}
	return false
}
