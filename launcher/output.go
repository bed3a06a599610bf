package launcher

import (
	"bufio"
	"fmt"
	"io"
	"sync"
)

// sink serializes what a job writes: the ranks' lines and ftrun's reports.
type sink struct {
	mu             sync.Mutex // serializes writes to stdout and stderr
	stdout, stderr io.Writer
}

func (s *sink) write(w io.Writer, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Write(b) // a broken stdout must not stop the job
}

// reportf writes one "ftrun: ..." line to stderr.
func (s *sink) reportf(format string, args ...any) {
	s.write(s.stderr, fmt.Appendf([]byte("ftrun: "), format+"\n", args...))
}

// lineBuffer is the longest line forwarded in one piece; longer lines are
// forwarded in pieces of this size (and only the first piece is tagged).
const lineBuffer = 64 << 10

// forwardLines copies r to w through s one line at a time, each line prefixed
// with prefix, until r ends. A last line without a newline gets one when
// prefix is not empty, so that the next tagged line starts on its own line.
func forwardLines(s *sink, w io.Writer, r io.Reader, prefix string) {
	br := bufio.NewReaderSize(r, lineBuffer)
	var buf []byte
	atStart := true
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			buf = buf[:0]
			if atStart {
				buf = append(buf, prefix...)
			}
			buf = append(buf, line...)
			atStart = line[len(line)-1] == '\n'
			if !atStart && err != nil && err != bufio.ErrBufferFull && prefix != "" {
				buf = append(buf, '\n')
			}
			s.write(w, buf)
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
