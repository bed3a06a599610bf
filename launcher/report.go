package launcher

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The job's exit report, DIR/report with --output-filename: plain text,
// one item a line, in this order (format 1; a later format changes the
// first line):
//
//	ftrun report 1
//	job ID                      the job id (FTRMA_JOB)
//	ranks N spares S            -n and --respawn's spares
//	exit CODE WORD              ftrun's exit status and its reason: ok,
//	                            failed, timeout, interrupted or aborted
//	time T                      from the start of the ranks to the end
//	rank R host H STATE ...     one line per world rank, spares included,
//	                            in rank order
//
// where T is seconds with three decimals and an "s" (1.250s), H the host
// the rank ran on ("-" if it never started; hostfile names, or ftrun's own
// host name), and STATE ... one of
//
//	finished status C at T      the rank exited by itself with status C
//	failed at T: REASON         its process died (a signal, --kill too),
//	                            was declared failed by the ranks' detector,
//	                            was lost with its host, or could not start
//	killed at T: REASON         ftrun killed it in ending the job
//	                            (--timeout, --no-ft, SIGINT or SIGTERM)
//	not-started                 a spare that no rank asked for
//
// REASON is free text to the end of the line. WriteReport writes it from a
// JobReport alone, so that whoever holds how the job ended can write it.

// Rank states of a JobReport.
const (
	RankFinished   = "finished"
	RankFailed     = "failed"
	RankKilled     = "killed"
	RankNotStarted = "not-started"
)

// JobReport is how a job ended, as DIR/report says it.
type JobReport struct {
	Job    string        // the job id
	Ranks  int           // -n
	Spares int           // --respawn's spares
	Exit   int           // ftrun's exit status
	End    string        // ok, failed, timeout, interrupted or aborted
	Took   time.Duration // from the start of the ranks to the end
	Rank   []RankReport  // every world rank, by rank, spares included
}

// RankReport is one rank's line of a JobReport.
type RankReport struct {
	Rank   int
	Host   string        // where it ran; "" if it never started
	State  string        // RankFinished, RankFailed, RankKilled or RankNotStarted
	Code   int           // RankFinished: its exit status
	At     time.Duration // when it ended, from the start of the job
	Reason string        // RankFailed, RankKilled: why
}

// WriteReport writes r to w in the report's format (see above).
func WriteReport(w io.Writer, r JobReport) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "ftrun report 1\njob %s\nranks %d spares %d\nexit %d %s\ntime %s\n",
		word(r.Job), r.Ranks, r.Spares, r.Exit, word(r.End), seconds(r.Took))
	for _, k := range r.Rank {
		host := word(k.Host)
		switch k.State {
		case RankFinished:
			fmt.Fprintf(b, "rank %d host %s finished status %d at %s\n", k.Rank, host, k.Code, seconds(k.At))
		case RankFailed, RankKilled:
			fmt.Fprintf(b, "rank %d host %s %s at %s: %s\n", k.Rank, host, k.State, seconds(k.At), oneLine(k.Reason))
		default:
			fmt.Fprintf(b, "rank %d host %s %s\n", k.Rank, host, RankNotStarted)
		}
	}
	return b.Flush()
}

// WriteReportFile writes r to dir/report: whole or not at all (a
// temporary file renamed), mode 0644.
func WriteReportFile(dir string, r JobReport) error {
	f, err := os.CreateTemp(dir, ".report-*")
	if err != nil {
		return err
	}
	err = WriteReport(f, r)
	if err == nil {
		err = f.Chmod(outputFileMode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, "report"))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// seconds formats d as the report does: 1.250s.
func seconds(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

// word makes s one field: "-" if empty, blanks replaced.
func word(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), "_")
}

// oneLine makes s fit on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// endWord is the reason of ftrun's exit status for r (JobReport.End).
func endWord(r *Result) string {
	switch {
	case r.TimedOut:
		return "timeout"
	case r.Signal != 0:
		return "interrupted"
	case r.Aborted:
		return "aborted"
	case r.ExitCode() == ExitOK:
		return "ok"
	}
	return "failed"
}

// rankReport is the line of the rank that ended as st, on host, in a job
// that ended as res; kills (--kill) and timeout (--timeout) are named in
// the reasons.
func rankReport(st RankStatus, host string, res *Result, kills []KillSpec, timeout time.Duration) RankReport {
	k := RankReport{Rank: int(st.Rank), Host: host, At: st.At, Reason: st.String()}
	ended := res.TimedOut || res.Aborted || res.Signal != 0
	switch {
	case st.Declared:
		k.State = RankFailed
		k.Reason = "declared failed by the ranks' failure detector; " + k.Reason
	case st.Killed:
		k.State = RankFailed
		k.Reason += " by ftrun's --kill"
		for _, ks := range kills {
			if ks.Rank == st.Rank {
				k.Reason = fmt.Sprintf("%s %v", k.Reason, ks)
				break
			}
		}
	case st.Signal != 0 && ended:
		k.State = RankKilled
		switch {
		case res.TimedOut:
			k.Reason += fmt.Sprintf(": --timeout %v expired", timeout)
		case res.Signal != 0:
			k.Reason += fmt.Sprintf(": ftrun got %v", res.Signal)
		default:
			k.Reason += ": --no-ft aborted the job"
		}
	case st.Signal != 0 || st.err != nil || st.lost != "" || st.Failed:
		k.State = RankFailed
	default:
		k.State, k.Code, k.Reason = RankFinished, st.Code, ""
	}
	return k
}
