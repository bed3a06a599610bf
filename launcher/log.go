package launcher

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/ftrma/ftrma"
)

// logfWriter hands each line a text handler writes to a printf-style
// function, without its newline.
type logfWriter func(format string, args ...any)

func (f logfWriter) Write(p []byte) (int, error) {
	f("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// logfLogger returns a logger whose records, from level up, go to logf as
// text lines (ftrma.NewLogHandler) that start with prefix.
func logfLogger(logf func(string, ...any), prefix string, level slog.Level) *slog.Logger {
	return slog.New(ftrma.NewLogHandler(logfWriter(logf), ftrma.LogOptions{Level: level, Prefix: prefix}))
}

// logfOf returns a printf-style function that logs each line at info on l.
func logfOf(l *slog.Logger) func(string, ...any) {
	return func(format string, args ...any) { l.Info(fmt.Sprintf(format, args...)) }
}
