package launcher

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Main is ftrun: it parses args (the command line without the command name),
// runs the job, forwards SIGINT and SIGTERM to it, and returns the exit status
// (see the Exit constants and Usage).
func Main(args []string, stdout, stderr io.Writer) int {
	opts, err := ParseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "ftrun: %v\nRun 'ftrun --help' for usage.\n", err)
		return ExitUsage
	}
	if opts.Help {
		io.WriteString(stdout, Usage)
		return ExitOK
	}
	if opts.Version {
		fmt.Fprintln(stdout, Version)
		return ExitOK
	}
	// The shared memory of jobs whose ftrun or agent was killed by SIGKILL:
	// on demand (--cleanup), and at every start.
	swept, err := sweepShm()
	if opts.Cleanup {
		for _, s := range swept {
			fmt.Fprintf(stdout, "ftrun: %s\n", s)
		}
		if err != nil {
			fmt.Fprintf(stderr, "ftrun: %v\n", err)
			return ExitLaunch
		}
		if len(swept) == 0 {
			fmt.Fprintln(stdout, "ftrun: no stale jobs")
		}
		return ExitOK
	}
	if opts.Verbose {
		for _, s := range swept {
			fmt.Fprintf(stderr, "ftrun: %s\n", s)
		}
	}
	opts.Stdout, opts.Stderr = stdout, stderr

	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	job, err := Start(opts)
	if ue, ok := errors.AsType[usageError](err); ok {
		fmt.Fprintf(stderr, "ftrun: %v\nRun 'ftrun --help' for usage.\n", ue)
		return ExitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "ftrun: %s\n", strings.TrimPrefix(err.Error(), "launcher: "))
		return ExitLaunch
	}
	if tr, why := job.Transport(); opts.Verbose || tr != TransportSHM && (opts.Transport == "" || opts.Transport == "auto") {
		fmt.Fprintf(stderr, "ftrun: job %s, %d ranks, transport %s (%s)\n", job.ID(), job.Size(), tr, why)
	}
	if opts.Verbose {
		for _, l := range job.Placement() {
			fmt.Fprintf(stderr, "ftrun: %s\n", l)
		}
	}
	go func() {
		for {
			select {
			case sig := <-sigc:
				job.Interrupt(sig.(syscall.Signal))
			case <-job.Done():
				return
			}
		}
	}()
	return job.Wait().ExitCode()
}
