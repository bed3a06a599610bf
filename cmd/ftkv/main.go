// Command ftkv is the tool of ftrma's replicated key-value store: a benchmark
// and a server run as ftrun jobs, and client commands that talk to a server.
//
//	ftrun -n N ftkv bench [--copies K] [--size S] [--ops M] [-json]
//	ftrun -n N ftkv serve --socket PATH [--copies K] [--snapshot-dir DIR [--snapshot-every D]] [--restore DIR]
//	ftkv put --socket PATH [--if-absent | --if-version N] KEY VALUE   (VALUE - reads it from stdin)
//	ftkv get --socket PATH [--version] KEY       (the value, raw, on stdout; --version: "VERSION\t" first)
//	ftkv del --socket PATH [--if-version N] KEY
//	ftkv cas --socket PATH KEY OLD NEW|--delete  (OLD -: no value; prints swapped or not swapped)
//	ftkv ls --socket PATH [--limit N] [--after KEY] [PREFIX]
//	ftkv len --socket PATH
//	ftkv snapshot --socket PATH
//	ftkv stop --socket PATH
//
// serve: every rank of the job opens the store and serves requests on its
// own Unix domain socket — rank 0 on PATH, rank r > 0 on PATH.r — so that a
// client reaches the store through any rank. A socket is mode 0600 and is
// removed when its rank exits; a rank refuses to start when its path is a
// live socket (a stale one, left by a killed server, is replaced). A rank's
// death does not stop the others (ULFM: ftrun carries on), and the store
// keeps every value whose replicas are not all gone. stop, sent to any
// rank, stops every rank: that rank broadcasts a notice (comm.Notify, a
// reliable broadcast that tolerates failures), every rank stops serving,
// the survivors agree (fault-tolerantly) that they are done, close the store
// and exit 0.
//
// Snapshots (store.Snapshot): with --snapshot-dir DIR the job writes a
// consistent snapshot of the store under DIR when a client asks (ftkv
// snapshot, through any rank), every --snapshot-every, and once more at
// stop, after every rank has answered its last request. --restore DIR
// starts a job of any size from the newest complete snapshot under DIR
// (snapshot.go says how the ranks take their snapshots together).
//
// The client commands exit 0 on success; 1 when the key is not found (get),
// when a conditional write's condition does not hold (cas, put --if-absent,
// put and del --if-version), or when the server reports an error or cannot
// be reached; and 2 on a usage error. ls prints keys one a line, as they are
// when they are plain printable text and Go-quoted otherwise (keyRule in
// client.go). The protocol is in proto.go.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

const usage = `usage: ftkv COMMAND [flags] [args]

ftkv runs ftrma's replicated key-value store under ftrun, and talks to it.

Commands run as ftrun jobs:
  ftrun -n N ftkv bench [--copies K] [--size S] [--ops M] [-json]
        measure put and get latency and put throughput
  ftrun -n N ftkv serve --socket PATH [--copies K] [--snapshot-dir DIR]
        [--snapshot-every D] [--restore DIR]
        serve the store on Unix sockets: rank 0 on PATH, rank r on PATH.r;
        snapshots under DIR on request, every D and at stop; --restore: start
        from the newest complete snapshot under DIR

Client commands, against a serving job:
  ftkv put --socket PATH [--if-absent | --if-version N] KEY VALUE
        store VALUE under KEY (VALUE - : stdin); --if-absent: only if KEY has
        no value; --if-version N: only if KEY's version is N
  ftkv get --socket PATH [--version] KEY
        print KEY's value, raw, to stdout; --version: its version and a tab first
  ftkv del --socket PATH [--if-version N] KEY
        delete KEY (no error if missing); --if-version N: only if its version is N
  ftkv cas --socket PATH KEY OLD NEW   (or: --delete KEY OLD)
        set KEY to NEW (or delete it) if its value is OLD (OLD - : KEY has no
        value; NEW - : stdin); prints "swapped" or "not swapped"
  ftkv ls --socket PATH [--limit N] [--after KEY] [PREFIX]
        list the keys with PREFIX, one a line, in byte order (keys that are not
        plain text are Go-quoted); --limit N: at most N, then a line on stderr
        that says how to continue (--after KEY)
  ftkv len --socket PATH              print the number of keys
  ftkv snapshot --socket PATH         write a snapshot under the job's --snapshot-dir
  ftkv stop --socket PATH             stop every rank of the serving job

  ftkv help [COMMAND]                 this text, or a command's flags

Exit status:
  0  success (ls also when --limit stopped it)
  1  get: the key is not found; cas: not swapped; put --if-absent, put and del
     --if-version: the condition did not hold (nothing changed); any command:
     the server reports an error or cannot be reached
  2  usage error
"ftkv COMMAND -h" describes a command's flags.
`

// commands maps a command name to its entry point, which returns the exit
// status.
var commands = func() map[string]func(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	m := map[string]func(args []string, stdin io.Reader, stdout, stderr io.Writer) int{
		"bench": func(args []string, _ io.Reader, stdout, stderr io.Writer) int { return runBench(args, stdout, stderr) },
		"serve": func(args []string, _ io.Reader, stdout, stderr io.Writer) int { return runServe(args, stdout, stderr) },
	}
	for _, name := range []string{"put", "get", "del", "cas", "ls", "len", "snapshot", "stop"} {
		m[name] = func(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
			return runClient(name, args, stdin, stdout, stderr)
		}
	}
	return m
}()

// run is ftkv with its arguments (without the program name) and streams; it
// returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	switch name := args[0]; name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(args) > 1 {
			if cmd, ok := commands[args[1]]; ok {
				return cmd([]string{"-h"}, stdin, stdout, stderr)
			}
			fmt.Fprintf(stderr, "ftkv help: unknown command %q\n\n%s", args[1], usage)
			return 2
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		cmd, ok := commands[name]
		if !ok {
			fmt.Fprintf(stderr, "ftkv: unknown command %q\n\n%s", name, usage)
			return 2
		}
		return cmd(args[1:], stdin, stdout, stderr)
	}
}

// parseFlags parses a command's flags, which may come before, between and
// after its arguments; "--" ends the flags. It returns the arguments; when
// done, the command ends with exit status code: 0 after -h (synopsis and
// flags on stdout), 2 after a bad flag (the error on stderr).
func parseFlags(fs *flag.FlagSet, args []string, synopsis string, stdout, stderr io.Writer) (rest []string, code int, done bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "%s\n\nFlags:\n", synopsis)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, 0, true
		}
		if err != nil {
			return nil, usageError(stderr, fs.Name(), err), true
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return append(rest, tail...), 0, false
}

// usageError reports a usage error of command cmd and returns exit status 2.
func usageError(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "ftkv %s: %v\n(ftkv %s -h lists the flags)\n", cmd, err, cmd)
	return 2
}

// errUsage marks errors that are the user's to fix, found only once the job
// runs (such as more copies than ranks): the command exits 2.
var errUsage = errors.New("usage")

// copiesFlag is --copies: the replicas of each key, by default 3 or the
// number of ranks if fewer.
type copiesFlag struct {
	n   int
	set bool // given on the command line
}

const defaultCopies = 3

func (c *copiesFlag) define(fs *flag.FlagSet) {
	c.n = defaultCopies
	fs.Func("copies", "replicas of each key `K`, on distinct ranks (default 3, or the number of ranks if fewer)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		c.n, c.set = n, true
		return nil
	})
}

// resolve returns the copies a job of size ranks uses.
func (c copiesFlag) resolve(size int) (int, error) {
	if !c.set {
		return min(c.n, size), nil
	}
	if c.n > size {
		return 0, fmt.Errorf("%w: --copies %d, but the job has %d ranks", errUsage, c.n, size)
	}
	return c.n, nil
}
