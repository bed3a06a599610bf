package launcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/startup"
	"golang.org/x/sys/unix"
)

// helperEnv names the helper mode when the test binary runs as a rank.
const helperEnv = "LAUNCHER_TEST_HELPER"

// helperLife bounds every helper rank: whatever happens, it exits by itself.
const helperLife = 30 * time.Second

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode, os.Args[1:]))
	}
	code := m.Run()
	if ftrunDir != "" {
		os.RemoveAll(ftrunDir)
	}
	os.Exit(code)
}

// helper is the rank program of the process tests. It returns the exit status.
func helper(mode string, args []string) int {
	rank, _ := strconv.Atoi(os.Getenv(jobwire.EnvRank))
	arg := func(i int) int {
		n, err := strconv.Atoi(args[i])
		if err != nil {
			panic(err)
		}
		return n
	}
	switch mode {
	case "print": // one line to stdout and one to stderr
		fmt.Printf("hello from rank %d\n", rank)
		fmt.Fprintf(os.Stderr, "warning from rank %d\n", rank)
		return 0
	case "exit": // args: RANK CODE: that rank exits with CODE
		if rank == arg(0) {
			return arg(1)
		}
		return 0
	case "env": // print the job environment, and the variables named by args ("-" when unset)
		for _, name := range []string{jobwire.EnvRank, jobwire.EnvSize, jobwire.EnvRendezvous, jobwire.EnvSecret, jobwire.EnvJob, jobwire.EnvLocalSize, jobwire.EnvHostAddr} {
			fmt.Printf("%s=%s\n", name, os.Getenv(name))
		}
		for _, name := range args {
			v, ok := os.LookupEnv(name)
			if !ok {
				v = "-"
			}
			fmt.Printf("rank %d: %s=%s\n", rank, name, v)
		}
		return 0
	case "stdin": // print what this rank reads from its standard input, to its end
		b, err := io.ReadAll(os.Stdin)
		fmt.Printf("rank %d read %q, %v\n", rank, b, err)
		return 0
	case "nostdin": // sleep a second without reading the standard input
		time.Sleep(time.Second)
		return 0
	case "affinity": // print the CPUs this rank may run on
		fmt.Printf("rank %d cpus %v\n", rank, allowedCPUs())
		return 0
	case "sleep": // args: RANK: that rank sleeps (to be killed), the others exit 0
		if rank == arg(0) {
			fmt.Printf("rank %d sleeping\n", rank)
			time.Sleep(helperLife)
		}
		return 0
	case "hang": // wait for SIGINT or SIGTERM and exit 0 on it
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
		fmt.Printf("rank %d ready\n", rank)
		select {
		case sig := <-c:
			fmt.Printf("rank %d got %v\n", rank, sig)
			return 0
		case <-time.After(helperLife):
			return 5
		}
	case "pid": // print the pid, then sleep
		fmt.Printf("pid %d\n", os.Getpid())
		time.Sleep(helperLife)
		return 0
	case "notice": // args: K [S [D]]: rendezvous without a transport; rank K sleeps (to be killed), rank S
		// reports K as suspected (after D), the others wait for the launcher's exit notice of K
		k := arg(0)
		me, err := rankFromEnv()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ctx, cancel := context.WithTimeout(context.Background(), helperLife)
		defer cancel()
		conn, _, err := me.join(ctx, fmt.Sprintf("rank%d", rank))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer conn.Close()
		fmt.Printf("rank %d joined\n", rank)
		if rank == k {
			time.Sleep(helperLife)
			return 0
		}
		if len(args) > 1 && rank == arg(1) {
			if len(args) > 2 {
				d, err := time.ParseDuration(args[2])
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				time.Sleep(d)
			}
			jobwire.WriteFrame(conn, jobwire.MsgSuspect, jobwire.RankPayload(ftrma.Rank(k)))
		}
		conn.SetDeadline(time.Now().Add(helperLife))
		for {
			typ, p, err := jobwire.ReadFrame(conn, jobwire.MaxSmallFrame)
			if err != nil {
				fmt.Fprintf(os.Stderr, "rank %d: no exit notice for rank %d: %v\n", rank, k, err)
				return 1
			}
			if r, err := jobwire.ParseRank(p, me.size); typ == jobwire.MsgExit && err == nil && int(r) == k {
				fmt.Printf("rank %d got the exit notice of rank %d\n", rank, k)
				return 0
			}
		}
	case "respawn": // args: DIE: see respawnHelper
		return respawnHelper(rank, arg(0))
	case "replace": // args: [first-spare-dies]: see replaceHelper
		return replaceHelper(rank, args)
	case "replacerounds": // see replaceRoundsHelper
		return replaceRoundsHelper(rank)
	case "replacefault": // see replaceFaultHelper
		return replaceFaultHelper(rank, args)
	case "hostreplace": // args: HOW: see hostReplaceHelper
		return hostReplaceHelper(rank, args[0])
	case "spawnxfer": // see spawnXferHelper
		return spawnXferHelper(rank)
	case "ticks": // args: N: see ticksHelper
		return ticksHelper(rank, arg(0))
	case "lateseg": // args: GOFILE: see lateSegHelper
		return lateSegHelper(args)
	case "join": // Join and exchange a message with every peer; args: [RANK]: that rank exits 7 instead
		if len(args) > 0 && rank == arg(0) {
			return 7
		}
		ctx, cancel := context.WithTimeout(context.Background(), helperLife)
		defer cancel()
		size, _ := strconv.Atoi(os.Getenv(jobwire.EnvSize))
		recv := newChanReceiver(size)
		s, err := startup.Join(ctx, recv)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.Close()
		defer s.Transport().Close()
		if v, ok := os.LookupEnv(jobwire.EnvSecret); ok {
			fmt.Fprintf(os.Stderr, "FTRMA_SECRET=%q still set after Join\n", v)
			return 1
		}
		if err := allToAll(ctx, s, recv); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", s.Rank(), err)
			return 1
		}
		fmt.Printf("rank %d of %d in job %s: exchanged with %d peers\n", s.Rank(), s.Size(), s.JobID(), s.Size()-1)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 100
}

var (
	ftrunOnce sync.Once
	ftrunDir  string // holds the ftrun binary; removed by TestMain
	ftrunPath string
	ftrunErr  error
)

// ftrun builds cmd/ftrun once (with -race when the tests have it) and returns
// its path; with FTRMA_E2E_BINDIR set it returns the ftrun there.
func ftrun(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process test: skipped in -short mode")
	}
	if dir := os.Getenv("FTRMA_E2E_BINDIR"); dir != "" {
		return filepath.Join(dir, "ftrun") // built already (the verbs guest has no Go)
	}
	ftrunOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		if ftrunDir, ftrunErr = os.MkdirTemp("", "ftrun-test-"); ftrunErr != nil {
			return
		}
		ftrunPath = filepath.Join(ftrunDir, "ftrun")
		args := []string{"build", "-o", ftrunPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(gobin, append(args, "github.com/ftrma/ftrma/cmd/ftrun")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			ftrunErr = fmt.Errorf("go build cmd/ftrun: %v\n%s", err, out)
		}
	})
	if ftrunErr != nil {
		t.Fatal(ftrunErr)
	}
	return ftrunPath
}

// helperCmd returns ftrun with flags, running this test binary in helper mode
// with args.
func helperCmd(t *testing.T, ctx context.Context, mode string, flags []string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// These jobs run up to a few dozen ranks on hosts of two CPUs.
	flags = append([]string{"--oversubscribe"}, flags...)
	cmd := exec.CommandContext(ctx, ftrun(t), append(append(flags, self), args...)...)
	// A -race binary sleeps a second at exit unless told not to.
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		panic(err)
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
