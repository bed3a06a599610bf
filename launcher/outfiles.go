package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
)

// --output-filename DIR (Config.OutputFilename): every rank's output also
// goes to files on the rank's own host, in Open MPI's layout (mpirun
// --output-filename, Open MPI 4.x; orte_iof_base_setup_output_files):
//
//	DIR/1/rank.N/stdout
//	DIR/1/rank.N/stderr
//
// 1 is the job's number in Open MPI (its first job, as every mpirun's); N
// is the world rank, zero-padded to the digits of the job's size, spares
// included (-n 8: rank.0 to rank.7; -n 12: rank.00 to rank.11), so that
// listings sort. Directories are created 0750 and files 0644 (before the
// umask), truncated if they exist, as Open MPI does. A relative DIR is
// relative to ftrun's working directory, as Open MPI makes it absolute
// against mpirun's; every host must be able to create that path.
//
// The files are written on the rank's host: by ftrun for the ranks it
// starts itself, by the host's agent for the others, spares included, and
// each line is written when the rank has written it, before it is
// forwarded to ftrun, so that a rank's file holds its output up to its
// death, and whatever happens to the link to ftrun. With --tag-output the
// files' lines carry the same "[rank] " prefix as ftrun's output (Open
// MPI's daemons tag the files' lines as they tag the forwarded ones).
//
// At the end ftrun writes DIR/report on its host (report.go).

// outputJobDir is the job's directory under DIR: Open MPI's local job id
// of an mpirun's (first and only) job.
const outputJobDir = "1"

// outputDirMode and outputFileMode are Open MPI's modes (S_IRWXU|S_IRGRP|
// S_IXGRP, 0644).
const (
	outputDirMode  os.FileMode = 0o750
	outputFileMode os.FileMode = 0o644
)

// checkOutputFilename checks a --output-filename value: Open MPI's
// ":nojobid,nocopy" directives are not supported, and a colon would be
// read as one by mpirun.
func checkOutputFilename(dir string) error {
	switch {
	case dir == "":
		return errors.New("--output-filename: empty directory")
	case strings.Contains(dir, ":"):
		return fmt.Errorf("--output-filename %q: Open MPI's :nojobid and :nocopy directives are not supported (and a directory name may not hold ':')", dir)
	}
	return nil
}

// rankDirName is rank r's directory under DIR/1 in a job of size world
// ranks (spares included): "rank.N", N zero-padded to the digits of size.
func rankDirName(r ftrma.Rank, size int) string {
	width := len(strconv.Itoa(max(size, 1)))
	return fmt.Sprintf("rank.%0*d", width, r)
}

// outputFiles is --output-filename as one host carries it out.
type outputFiles struct {
	dir  string // DIR, absolute
	size int    // the job's world ranks, spares included; 0 until known
	tag  bool   // --tag-output: the files' lines carry the "[rank] " prefix
}

// jobDir is DIR/1.
func (o *outputFiles) jobDir() string { return filepath.Join(o.dir, outputJobDir) }

// rankDir is DIR/1/rank.N of rank r.
func (o *outputFiles) rankDir(r ftrma.Rank) string {
	return filepath.Join(o.jobDir(), rankDirName(r, o.size))
}

// prefix is what the lines of rank r's files start with.
func (o *outputFiles) prefix(r ftrma.Rank) string {
	if !o.tag {
		return ""
	}
	return "[" + strconv.Itoa(int(r)) + "] "
}

// prepare makes DIR/1 on this host and checks that it can create files
// there, before any rank starts; the error names host and path.
func (o *outputFiles) prepare(host string) error {
	dir := o.jobDir()
	err := os.MkdirAll(dir, outputDirMode)
	if err == nil {
		var f *os.File
		if f, err = os.CreateTemp(dir, ".ftrun-probe-*"); err == nil {
			f.Close()
			os.Remove(f.Name())
		}
	}
	if err != nil {
		return fmt.Errorf("--output-filename: cannot write %s on host %s: %w", dir, host, unwrapPath(err))
	}
	return nil
}

// unwrapPath drops the path from an *os.PathError, which the callers name
// themselves.
func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return fmt.Errorf("%s %s: %w", pe.Op, pe.Path, pe.Err)
	}
	return err
}

// open creates rank r's directory and its two files, stdout and stderr.
func (o *outputFiles) open(r ftrma.Rank, host string) ([2]*rankFile, error) {
	var files [2]*rankFile
	dir := o.rankDir(r)
	if err := os.MkdirAll(dir, outputDirMode); err != nil {
		return files, fmt.Errorf("--output-filename: rank %d: cannot create %s on host %s: %w", r, dir, host, unwrapPath(err))
	}
	for i, name := range []string{"stdout", "stderr"} {
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, outputFileMode)
		if err != nil {
			closeFiles(files)
			return [2]*rankFile{}, fmt.Errorf("--output-filename: rank %d: cannot create %s on host %s: %w", r, path, host, unwrapPath(err))
		}
		files[i] = &rankFile{f: f}
	}
	return files, nil
}

// closeFiles closes the files open returned (nil ones are skipped).
func closeFiles(files [2]*rankFile) {
	for _, f := range files {
		f.close()
	}
}

// rankFile is one of a rank's output files. Each write goes to the file
// at once (no buffer: a line is there as soon as the rank has written
// it); the first error stops the writes and is reported once.
type rankFile struct {
	mu     sync.Mutex
	f      *os.File
	err    error
	report func(error) // told of the first error; may be nil
}

// write writes b (a line, or a piece of one) to the file.
func (w *rankFile) write(b []byte) {
	if w == nil || len(b) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.f == nil {
		return
	}
	if _, err := w.f.Write(b); err != nil {
		w.err = err
		if w.report != nil {
			w.report(err)
		}
	}
}

// close closes the file; later writes do nothing.
func (w *rankFile) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}

// hostName is this host's name in --output-filename's errors and the
// report.
func hostName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}

// prepareAgentFiles has every agent of the job make DIR/1 on its host
// (msgOutputFiles), all at once, and waits for their answers: a host
// that cannot write there fails the job before any rank starts.
func (j *Job) prepareAgentFiles() error {
	msg := outputFilesMsg{dir: j.files.dir, tag: j.files.tag}.append(nil)
	for _, l := range j.links {
		l.conn.SetDeadline(time.Now().Add(agentTimeout))
		if err := jobwire.WriteFrame(l.conn, msgOutputFiles, msg); err != nil {
			return fmt.Errorf("agent %s: send the output directory: %w", l.addr, err)
		}
	}
	var errs []error
	for _, l := range j.links {
		typ, p, err := jobwire.ReadFrame(l.conn, maxLaunch)
		l.conn.SetDeadline(time.Time{})
		if err == nil {
			err = jobwire.ExpectFrom(typ, p, msgOutputReady, "output ready", "agent")
		}
		if err == nil && len(p) > 0 {
			err = errors.New(jobwire.Printable(p))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("agent %s: %w", l.addr, err))
		}
	}
	return errors.Join(errs...)
}
