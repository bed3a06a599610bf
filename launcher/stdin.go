package launcher

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ftrma/ftrma"
	"golang.org/x/sys/unix"
)

// Standard input (ftrun --stdin), as mpirun's: ftrun reads its standard
// input and forwards it to one rank (rank 0 by default), to every rank, or to
// none; the others read /dev/null. A rank on another host gets it through
// its agent (msgStdin). Neither side ever waits for a rank that does not
// read: each rank's part waits in a queue of stdinQueue chunks, and what
// comes once the queue is full is dropped for that rank, with a report. A
// spare gets none.

// Stdin values besides a rank number.
const (
	StdinNone = "none"
	StdinAll  = "all"
)

const (
	stdinChunk = 64 << 10 // bytes read at once, and the most a msgStdin carries
	stdinQueue = 64       // chunks queued for one rank (4 MiB)
)

// checkStdin checks a --stdin value for a job of n ranks; n < 1 when the
// job's size is not known yet (a hostfile or Slurm gives it later).
func checkStdin(v string, n int) error {
	switch v {
	case "", StdinNone, StdinAll:
		return nil
	}
	r, err := strconv.Atoi(v)
	switch {
	case err != nil || r < 0:
		return fmt.Errorf("--stdin %q: want none, all or a rank", v)
	case n >= 1 && r >= n:
		return fmt.Errorf("--stdin %q: want none, all or a rank of the job (0 to %d)", v, n-1)
	}
	return nil
}

// stdinRanks returns the ranks that get ftrun's standard input.
func (o *Config) stdinRanks() []ftrma.Rank {
	switch o.Stdin {
	case "", StdinNone:
		return nil
	case StdinAll:
		all := make([]ftrma.Rank, o.N)
		for r := range all {
			all[r] = ftrma.Rank(r)
		}
		return all
	}
	r, _ := strconv.Atoi(o.Stdin)
	return []ftrma.Rank{ftrma.Rank(r)}
}

// stdinReadable reports whether ftrun may read its standard input: it is
// not a terminal, or ftrun's process group is that terminal's foreground
// (a background ftrun reading its terminal would be stopped by SIGTTIN).
func stdinReadable() bool {
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err != nil {
		return true // not a terminal
	}
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}

// stdinDest is one rank's part of the standard input: a pipe to a rank of
// this host, or its agent's link.
type stdinDest struct {
	rank    ftrma.Rank
	w       *os.File   // this host's rank: the write end of its stdin
	link    *agentLink // a remote rank's agent
	ch      chan []byte
	dropped bool
}

// feed hands d's chunks to the rank until ch closes, then ends its input.
func (d *stdinDest) feed() {
	if d.w != nil {
		broken := false
		for b := range d.ch {
			if !broken {
				_, err := d.w.Write(b)
				broken = err != nil // the rank closed its input or ended: the rest goes nowhere
			}
		}
		d.w.Close()
		return
	}
	for b := range d.ch {
		for d.link.backlog() > stdinQueue {
			time.Sleep(time.Millisecond) // the link's writer is behind: do not pile up frames
		}
		d.link.send(msgStdin, appendStdin(nil, d.rank, b))
	}
	d.link.send(msgStdin, appendStdin(nil, d.rank, nil)) // the end
}

// forwardStdin reads in until it ends and hands each chunk to every
// destination, then ends their input. report says what was dropped.
func forwardStdin(in io.Reader, dests []*stdinDest, report func(string, ...any)) {
	var wg sync.WaitGroup
	for _, d := range dests {
		d.ch = make(chan []byte, stdinQueue)
		wg.Add(1)
		go func() { defer wg.Done(); d.feed() }()
	}
	for {
		buf := make([]byte, stdinChunk)
		n, err := in.Read(buf)
		if n > 0 {
			for _, d := range dests {
				if d.dropped {
					continue
				}
				select {
				case d.ch <- buf[:n]:
				default:
					d.dropped = true
					report("rank %d does not read its standard input: ftrun drops the rest of it for that rank", d.rank)
				}
			}
		}
		if err != nil {
			break
		}
	}
	for _, d := range dests {
		close(d.ch)
	}
	wg.Wait()
}

// eofReader is an input that has ended.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// msgStdin's payload: the rank, then the bytes; none: the input ended.
func appendStdin(b []byte, r ftrma.Rank, data []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(r))
	return append(b, data...)
}

func parseStdin(p []byte) (ftrma.Rank, []byte, error) {
	if len(p) < 4 || len(p) > 4+stdinChunk {
		return 0, nil, fmt.Errorf("standard input message of %d bytes", len(p))
	}
	return ftrma.Rank(binary.BigEndian.Uint32(p)), p[4:], nil
}

// wantsStdin reports whether rank r of a launch gets ftrun's input.
func (l *launchSpec) wantsStdin(r ftrma.Rank) bool { return slices.Contains(l.stdin, r) }
