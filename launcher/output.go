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
// With f (--output-filename), each line goes to f first, as it is: written
// before it is forwarded, so that a stuck w does not hold up the file.
func forwardLines(s *sink, w io.Writer, r io.Reader, prefix string, f *rankFile) {
	var buf []byte
	scanLines(r, func(piece []byte, start, last bool) {
		if f != nil {
			buf = appendPiece(buf[:0], prefix, piece, start, last)
			f.write(buf)
		}
		s.writePiece(w, prefix, piece, start, last)
	})
}

// scanLines reads r until it ends and hands emit each line, or each piece of
// a line longer than lineBuffer. start says that the piece begins a line;
// last that it is the last piece of r (it may then be empty, and does not end
// with a newline unless r did). emit must not keep piece.
func scanLines(r io.Reader, emit func(piece []byte, start, last bool)) {
	br := bufio.NewReaderSize(r, lineBuffer)
	atStart := true
	for {
		line, err := br.ReadSlice('\n')
		last := err != nil && err != bufio.ErrBufferFull
		if len(line) > 0 || last {
			emit(line, atStart, last)
		}
		if len(line) > 0 {
			atStart = line[len(line)-1] == '\n'
		}
		if last {
			return
		}
	}
}

// writePiece writes one piece of a rank's output (see scanLines) to w: with
// prefix if it starts a line, and with a newline added if it is the last
// piece, unterminated, and prefix is not empty.
func (s *sink) writePiece(w io.Writer, prefix string, piece []byte, start, last bool) {
	if len(piece) == 0 {
		return
	}
	s.write(w, appendPiece(make([]byte, 0, len(prefix)+len(piece)+1), prefix, piece, start, last))
}

// appendPiece appends to b one piece of a rank's output as writePiece
// writes it: nothing for an empty piece.
func appendPiece(b []byte, prefix string, piece []byte, start, last bool) []byte {
	if len(piece) == 0 {
		return b
	}
	if start {
		b = append(b, prefix...)
	}
	b = append(b, piece...)
	if last && piece[len(piece)-1] != '\n' && prefix != "" {
		b = append(b, '\n')
	}
	return b
}
