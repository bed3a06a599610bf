package launcher

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
	"github.com/ftrma/ftrma/launcher/internal/members"
	"github.com/ftrma/ftrma/startup"
	"github.com/ftrma/ftrma/transport/verbs"
)

func TestResolveTransport(t *testing.T) {
	for in, want := range map[string]string{"": "shm", "auto": "shm", "shm": "shm", "tcp": "tcp"} {
		if got, err := ResolveTransport(in); err != nil || got != want {
			t.Errorf("ResolveTransport(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, name := range []string{"verbs", "shm+verbs", "udp"} {
		got, err := ResolveTransport(name)
		switch {
		case verbs.Built && name != "udp":
			if err != nil || got != name {
				t.Errorf("ResolveTransport(%q) = %q, %v in a build with verbs", name, got, err)
			}
		case err == nil:
			t.Errorf("ResolveTransport(%q) accepted", name)
		case name != "udp" && !strings.Contains(err.Error(), "built without RDMA verbs"):
			t.Errorf("ResolveTransport(%q): %v, want built without verbs", name, err)
		}
	}
	if _, err := ParseArgs([]string{"--transport", "udp", "-n", "2", "prog"}); err == nil {
		t.Error("ftrun --transport udp accepted")
	}
	o, err := ParseArgs([]string{"--transport", "tcp", "-v", "-n", "2", "prog"})
	if err != nil || o.Transport != "tcp" || !o.Verbose {
		t.Errorf("--transport tcp -v: %+v, %v", o, err)
	}
}

func TestRankEnv(t *testing.T) {
	// A job of N ranks: at least as many as CPUs gets GOMAXPROCS=1.
	n := runtime.NumCPU()
	vars := rankVars(1, n, rankRange(0, n), "127.0.0.1:5", []byte{0xab, 0xcd}, 0, "j", "", &Config{})
	env := rankEnv([]string{"PATH=/bin", "FTRMA_RANK=9", "FTRMA_OTHER=x", "HOME=/h"}, vars, n)
	want := []string{"PATH=/bin", "HOME=/h", "GOMAXPROCS=1", "FTRMA_LEASE=1s", "FTRMA_TRANSPORT=shm", "FTRMA_RANK=1", "FTRMA_SIZE=" + strconv.Itoa(n), "FTRMA_RENDEZVOUS=127.0.0.1:5",
		"FTRMA_SECRET=abcd", "FTRMA_HOST_INDEX=0", "FTRMA_JOB=j", "FTRMA_LOCAL_SIZE=" + strconv.Itoa(n)}
	if !reflect.DeepEqual(env, want) {
		t.Fatalf("rankEnv = %q, want %q", env, want)
	}
	// Fewer ranks than CPUs, or the user's own GOMAXPROCS: left alone.
	for _, c := range []struct {
		base []string
		size int
	}{{[]string{"PATH=/bin"}, n - 1}, {[]string{"GOMAXPROCS=4"}, n}} {
		if c.size < 1 {
			continue
		}
		env := rankEnv(c.base, rankVars(0, c.size, rankRange(0, c.size), "x", nil, 0, "j", "", &Config{}), c.size)
		if slices.Contains(env, "GOMAXPROCS=1") {
			t.Errorf("rankEnv(%q, size %d) sets GOMAXPROCS=1", c.base, c.size)
		}
	}
}

// chanReceiver is a transport.Receiver that queues what it is given.
type chanReceiver struct {
	msgs chan received
	down chan ftrma.Rank
}

type received struct {
	from ftrma.Rank
	msg  string
}

func newChanReceiver(size int) *chanReceiver {
	return &chanReceiver{msgs: make(chan received, 4*size), down: make(chan ftrma.Rank, 4*size)}
}

func (c *chanReceiver) HandleMessage(from ftrma.Rank, msg []byte) {
	c.msgs <- received{from, string(msg)}
}

// HandlePeerDown never blocks: a peer can be reported down more than once (its
// goodbye, then ftrun's exit notice), and a receiver that blocked would hold
// up the transport's progress goroutine, and with it the transport's Close,
// for good once allToAll no longer reads (the rank then hung, and ftrun with
// it, in about 1 run in 8 on a loaded machine).
func (c *chanReceiver) HandlePeerDown(peer ftrma.Rank, err error) {
	select {
	case c.down <- peer:
	default:
	}
}

// allToAll sends "hello from R" to every peer and waits for every peer's
// hello, then sends "bye" and waits for every peer's bye or its departure (a
// peer leaves once it has every bye). Nobody leaves before everybody has every
// hello, so the hello round is checked exactly: no hello may be lost,
// duplicated or preceded by a peer-down event.
func allToAll(ctx context.Context, s *startup.Session, recv *chanReceiver) error {
	t := s.Transport()
	if t.Rank() != s.Rank() || t.Size() != s.Size() {
		return fmt.Errorf("transport is rank %d of %d, session rank %d of %d", t.Rank(), t.Size(), s.Rank(), s.Size())
	}
	sendAll := func(msg string) error {
		for p := range ftrma.Rank(s.Size()) {
			if p != s.Rank() {
				if err := t.Send(p, []byte(msg)); err != nil {
					return fmt.Errorf("send %q to %d: %w", msg, p, err)
				}
			}
		}
		return nil
	}
	hellos := make(map[ftrma.Rank]bool)
	byes := make(map[ftrma.Rank]bool) // or gone
	var downs []ftrma.Rank
	// receive takes one event; a peer may send its bye before this rank has
	// every hello, but never before its own hello.
	receive := func(byeRound bool) error {
		select {
		case m := <-recv.msgs:
			switch {
			case m.msg == fmt.Sprintf("hello from %d", m.from) && !hellos[m.from]:
				hellos[m.from] = true
			case m.msg == "bye" && hellos[m.from] && !byes[m.from]:
				byes[m.from] = true
			case m.msg == "bye" && slices.Contains(downs, m.from):
				// transport/tcp may report a peer down before delivering
				// the last message the peer sent before it closed.
			default:
				return fmt.Errorf("unexpected message %q from %d (hellos from %v, byes from %v, downs %v)", m.msg, m.from, hellos, byes, downs)
			}
		case p := <-recv.down:
			if !byeRound {
				return fmt.Errorf("rank %d went down", p)
			}
			byes[p] = true
			downs = append(downs, p)
		case <-ctx.Done():
			return fmt.Errorf("%d hellos, %d byes: %w", len(hellos), len(byes), ctx.Err())
		}
		return nil
	}
	if err := sendAll(fmt.Sprintf("hello from %d", s.Rank())); err != nil {
		return err
	}
	for len(hellos) < s.Size()-1 {
		if err := receive(false); err != nil {
			return err
		}
	}
	if err := sendAll("bye"); err != nil {
		return err
	}
	for len(byes) < s.Size()-1 {
		if err := receive(true); err != nil {
			return err
		}
	}
	return nil
}

// setRankEnv sets the job environment of rank r of the n ranks of s's job,
// as ftrun would (one host, transport TCP); t restores it after the test.
func setRankEnv(t *testing.T, s *rvServer, r, n int) {
	t.Helper()
	vars := map[string]string{
		jobwire.EnvRank:       strconv.Itoa(r),
		jobwire.EnvSize:       strconv.Itoa(n),
		jobwire.EnvRendezvous: s.addr(),
		jobwire.EnvSecret:     hex.EncodeToString(jobwire.HostSecret(testSecret(1), 0)),
		jobwire.EnvJob:        "test",
		jobwire.EnvLocalSize:  strconv.Itoa(n),
		jobwire.EnvTransport:  jobwire.TransportTCP,
	}
	for _, name := range []string{jobwire.EnvRank, jobwire.EnvSize, jobwire.EnvRendezvous, jobwire.EnvSecret, jobwire.EnvJob,
		jobwire.EnvLocalSize, jobwire.EnvSpin, jobwire.EnvHBPeriod, jobwire.EnvHBTimeout, jobwire.EnvTransport,
		jobwire.EnvVerbsDevice, jobwire.EnvVerbsGID, jobwire.EnvHostAddr, jobwire.EnvLocalRanks} {
		t.Setenv(name, "") // restored after the test
		if v, ok := vars[name]; ok {
			os.Setenv(name, v)
		} else {
			os.Unsetenv(name)
		}
	}
}

// joinInProcess makes ranks 0..len(recvs)-1 of s's job join in this process
// through startup.Join, each in a goroutine, and returns their sessions once
// every Join returned (nil for a rank whose Join failed, with its error).
// Join reads the process environment, so rank r's is set only when rank
// r-1's Join has published its address, and so has read its own.
func joinInProcess(t *testing.T, ctx context.Context, s *rvServer, recvs []*chanReceiver) ([]*startup.Session, []error) {
	t.Helper()
	n := len(recvs)
	sessions := make([]*startup.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		setRankEnv(t, s, r, n)
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			sessions[r], errs[r] = startup.Join(ctx, recvs[r])
		})
		if !waitFor(func() bool {
			select {
			case <-done:
				return true
			default:
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.addrs[r].Common != ""
		}) {
			t.Fatalf("rank %d neither published nor gave up", r)
		}
	}
	wg.Wait()
	return sessions, errs
}

// Four ranks join in one process over the real TCP transport and exchange
// control messages.
func TestJoinInProcess(t *testing.T) {
	const n = 4
	s, logs := startServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	recvs := make([]*chanReceiver, n)
	for r := range recvs {
		recvs[r] = newChanReceiver(n)
	}
	sessions, errs := joinInProcess(t, ctx, s, recvs)
	var wg sync.WaitGroup
	for r, sess := range sessions {
		if sess != nil {
			wg.Go(func() { errs[r] = allToAll(ctx, sess, recvs[r]) })
		}
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for _, sess := range sessions {
		if sess != nil {
			sess.Transport().Close()
			if err := sess.Close(); err != nil {
				t.Error(err)
			}
			sess.Close() // twice is fine
		}
	}
	if logs.String() != "" {
		t.Errorf("server log:\n%s", logs)
	}
}

// The supervision channel: the launcher's exit notices reach every other
// rank's receiver as peer-down events (also for exits that happened before a
// rank got the address list), and a rank's suspicion reaches the launcher.
func TestSupervisionChannel(t *testing.T) {
	const n = 3
	logs := new(logRecorder)
	suspects := make(chan [2]ftrma.Rank, 4)
	s, err := listenRendezvous(rvConfig{Size: n, Secret: testSecret(1), Logger: logs.logger(), HandshakeTimeout: testTimeout,
		Suspect: func(r, by ftrma.Rank) { suspects <- [2]ftrma.Rank{r, by} }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	recvs := make([]*chanReceiver, n)
	for r := range recvs {
		recvs[r] = newChanReceiver(n)
	}
	sessions, errs := joinInProcess(t, ctx, s, recvs)
	defer func() {
		for _, sess := range sessions {
			if sess != nil {
				sess.Transport().Close()
				sess.Close()
			}
		}
	}()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	s.rankExited(2, "was killed by signal 9", false)
	for _, r := range []int{0, 1} {
		select {
		case down := <-recvs[r].down:
			if down != 2 {
				t.Fatalf("rank %d told that rank %d is down, want 2", r, down)
			}
		case <-ctx.Done():
			t.Fatalf("rank %d never told of rank 2's exit", r)
		}
	}
	// A rank that announced its departure and exited cleanly is no failure:
	// nobody is told. (Rank 1's notice would arrive before anything later.)
	if err := sessions[1].Leave(); err != nil {
		t.Fatal(err)
	}
	waitFor(func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.leaving[1] })
	s.rankExited(1, "exited with status 0", true)
	if err := sessions[0].Suspect(1); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-suspects:
		if got != [2]ftrma.Rank{1, 0} {
			t.Fatalf("suspicion %v, want rank 1 by rank 0", got)
		}
	case <-ctx.Done():
		t.Fatal("the launcher never heard the suspicion")
	}
	select {
	case down := <-recvs[0].down:
		t.Fatalf("rank 0 told that rank %d is down after rank 1 left cleanly", down)
	default:
	}
}

// One rule fits a job to a host's CPUs (jobwire.CPUShare), and GOMAXPROCS
// follows it: GOMAXPROCS=1 from as many ranks as CPUs on. (startup's tests
// check that the detector's timeout and busy-polling follow it too.)
func TestOneCPURule(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, local := range []int{1, cpus - 1, cpus, cpus + 1, 2 * cpus, 2*cpus + 1, 5 * cpus} {
		if local < 1 {
			continue
		}
		full, _ := jobwire.CPUShare(local)
		env := rankEnv([]string{"PATH=/bin"}, nil, local)
		if got := slices.Contains(env, "GOMAXPROCS=1"); got != full {
			t.Errorf("%d ranks on %d CPUs: GOMAXPROCS=1 set %v, full %v", local, cpus, got, full)
		}
	}
}

func TestChooseTransport(t *testing.T) {
	for _, c := range []struct{ name, want string }{{"tcp", "tcp"}, {"shm", "shm"}} {
		if got, why, err := chooseTransport(c.name, 4, 0, false, "", ""); err != nil || got != c.want || why != "as asked" {
			t.Errorf("chooseTransport(%q) = %q, %q, %v", c.name, got, why, err)
		}
	}
	free, ok := shmFree()
	got, why, err := chooseTransport("auto", 4, 0, false, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]string{true: "shm", false: "tcp"}[!ok || free >= shmNeed(4)]; got != want {
		t.Errorf("auto with %d bytes free: %q (%s), want %q", free, got, why, want)
	}
	// A job too large for any /dev/shm falls back to TCP.
	if got, why, _ := chooseTransport("", 1<<20, 0, false, "", ""); ok && got != "tcp" {
		t.Errorf("auto for 2^20 ranks: %q (%s)", got, why)
	}
}

func TestSpinFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"-1": -1, "0": 0, "20us": 20 * time.Microsecond, "-1ms": -time.Millisecond} {
		o, err := ParseArgs([]string{"--spin", in, "-n", "2", "prog"})
		if err != nil || o.Spin != want {
			t.Errorf("--spin %s: %v, %v; want %v", in, o.Spin, err, want)
		}
	}
	if _, err := ParseArgs([]string{"--spin", "fast", "-n", "2", "prog"}); err == nil {
		t.Error("--spin fast accepted")
	}
}

// The host layer's timing stretches with the detector timeout a job asks
// for, and the ranks are told their lease term.
func TestHostTimingScales(t *testing.T) {
	// A full host stretches the lease by its ranks per CPU, unless
	// --hb-timeout stretches it more.
	if tm := timingFor(&Config{cpuStretch: 128}); tm.lease != 128*jobwire.LeaseTerm {
		t.Errorf("lease on a host with 128 ranks per CPU: %v, want %v", tm.lease, 128*jobwire.LeaseTerm)
	}
	if tm := timingFor(&Config{cpuStretch: 2, HBTimeout: 600 * time.Millisecond}); tm.lease != 10*jobwire.LeaseTerm {
		t.Errorf("lease with --hb-timeout 600ms on a host with 2 ranks per CPU: %v, want %v", tm.lease, 10*jobwire.LeaseTerm)
	}
	if tm := timingFor(&Config{}); tm.scale != 1 || tm.timeout != linkTimeout || tm.lease != jobwire.LeaseTerm {
		t.Errorf("default timing %+v", tm)
	}
	tm := timingFor(&Config{HBTimeout: 600 * time.Millisecond})
	if tm.scale != 10 || tm.timeout != 10*linkTimeout || tm.ping != 10*linkPing || tm.lease != 10*jobwire.LeaseTerm || tm.leaseWait() != 15*jobwire.LeaseTerm {
		t.Errorf("timing for --hb-timeout 600ms: %+v", tm)
	}
	// The host layer is the chain of failure bounds the ranks wait by.
	if ch := (failure.Chain{Lease: tm.lease}); tm.timeout != ch.HostSilent() || tm.leaseWait() != ch.LeaseWait() {
		t.Errorf("timing %+v is not the chain's for a lease of %v (host silent %v, lease wait %v)", tm, tm.lease, ch.HostSilent(), ch.LeaseWait())
	}
	vars := rankVars(0, 2, rankRange(0, 2), "x", nil, 0, "j", "", &Config{HBTimeout: 600 * time.Millisecond})
	if !slices.Contains(vars, jobwire.EnvLease+"=10s") {
		t.Errorf("rank variables %q do not pass the lease term", vars)
	}
	// Under the arbiter the lease does not stretch with the crowding (the
	// links do), and the ranks get the arbiter's verdict bound.
	arb := &Config{cpuStretch: 4, arbitrated: true, hostVerdict: arbiter.VerdictBound(arbiterConfig(3, jobwire.LeaseTerm))}
	if tm := timingFor(arb); tm.lease != jobwire.LeaseTerm || tm.timeout != 4*linkTimeout {
		t.Errorf("timing under the arbiter at 4 ranks per CPU: %+v, want an unstretched lease and stretched links", tm)
	}
	vars = rankVars(0, 2, rankRange(0, 2), "x", nil, 0, "j", "", arb)
	if !slices.Contains(vars, jobwire.EnvLease+"=1s") || !slices.Contains(vars, jobwire.EnvHostVerdict+"="+arb.hostVerdict.String()) || arb.hostVerdict < 4*time.Second {
		t.Errorf("rank variables under the arbiter %q: want a 1s lease and its verdict bound %v", vars, arb.hostVerdict)
	}
	if mt := scaledMembers(10); mt.ProbeInterval != 10*members.DefaultTiming().ProbeInterval {
		t.Errorf("memberlist timing not scaled: %+v", mt)
	}
}
