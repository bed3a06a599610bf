package launcher

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/startup"
)

// respawnHelper is the rank program of the respawn tests, a job of 2
// ranks and 2 spares on TCP. Ranks 0 and 1 join with startup and listen
// for admissions (OnAdmit). Rank 0 asks for one spare with payload "x";
// if die >= 0 (the spare that exits with status 3 before it joins), it
// asks once more, with payload "y"; then it asks for 2 more, which must
// fail. Each prints what it got, and the first admission it heard of.
// A spare joins the rendezvous without a transport (it publishes
// "spareR"), prints its payload, address list and roster, and waits for
// rank 0's exit notice.
func respawnHelper(rank, die int) int {
	ctx, cancel := context.WithTimeout(context.Background(), helperLife)
	defer cancel()
	size, _ := strconv.Atoi(os.Getenv(jobwire.EnvSize))
	spares, _ := strconv.Atoi(os.Getenv(jobwire.EnvSpares))
	if spares > 0 && rank >= size-spares {
		return spareHelper(ctx, rank, die)
	}
	if _, ok := os.LookupEnv(jobwire.EnvSpawn); ok {
		fmt.Fprintf(os.Stderr, "rank %d: %s set\n", rank, jobwire.EnvSpawn)
		return 1
	}
	recv := newChanReceiver(size)
	s, err := startup.Join(ctx, recv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	defer s.Transport().Close()
	admits := make(chan string, 8)
	s.OnAdmit(func(r ftrma.Rank, addr string, payload []byte) {
		admits <- fmt.Sprintf("%d %s %s", r, addr, payload)
	})
	if _, ok := s.Spawned(); ok {
		fmt.Fprintf(os.Stderr, "rank %d: Spawned says it is a spare\n", rank)
		return 1
	}
	if spares == 0 {
		ranks, err := s.Spawn(ctx, 1, []byte("x"))
		fmt.Printf("rank %d without spares: %v no spares %v: %v\n", rank, ranks, errors.Is(err, startup.ErrNoSpares), err)
		return 0
	}
	if rank == 0 {
		ranks, err := s.Spawn(ctx, 1, []byte("x"))
		fmt.Printf("rank 0 spawn x: %v %v\n", ranks, err)
		if die >= 0 {
			ranks, err := s.Spawn(ctx, 1, []byte("y"))
			fmt.Printf("rank 0 spawn y: %v %v\n", ranks, err)
		}
		ranks, err = s.Spawn(ctx, 2, []byte("z"))
		fmt.Printf("rank 0 spawn 2 more: %v spawn error %v: %v\n", ranks, errors.Is(err, startup.ErrSpawn), err)
	}
	select {
	case a := <-admits:
		fmt.Printf("rank %d admitted %s\n", rank, a)
	case <-ctx.Done():
		fmt.Fprintf(os.Stderr, "rank %d: no admission\n", rank)
		return 1
	}
	return 0
}

func spareHelper(ctx context.Context, rank, die int) int {
	if rank == die {
		return 3
	}
	payload, err := base64.StdEncoding.DecodeString(os.Getenv(jobwire.EnvSpawn))
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %s: %v\n", rank, jobwire.EnvSpawn, err)
		return 1
	}
	me, err := rankFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	conn, addrs, err := me.join(ctx, fmt.Sprintf("spare%d", rank))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	live := make([]string, len(addrs))
	for q, a := range addrs {
		live[q] = strconv.FormatBool(a != "")
	}
	fmt.Printf("rank %d payload %s live %s\n", rank, payload, strings.Join(live, ","))
	typ, p, err := jobwire.ReadFrame(conn, jobwire.MaxSuperFrame)
	if err != nil || typ != jobwire.MsgRoster {
		fmt.Fprintf(os.Stderr, "rank %d: no roster: %d %v\n", rank, typ, err)
		return 1
	}
	failed, err := jobwire.ParseRanks(p, me.size)
	fmt.Printf("rank %d roster %v %v\n", rank, failed, err)
	for {
		typ, p, err := jobwire.ReadFrame(conn, jobwire.MaxSuperFrame)
		if err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: no exit notice of rank 0: %v\n", rank, err)
			return 1
		}
		if r, err := jobwire.ParseRank(p, me.size); typ == jobwire.MsgExit && err == nil && r == 0 {
			return 0
		}
	}
}

// runRespawn runs the respawn job and returns its output.
func runRespawn(t *testing.T, die int, flags ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := helperCmd(t, ctx, "respawn", append([]string{"-n", "2", "--transport", "tcp"}, flags...), strconv.Itoa(die))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ftrun: %v\n%s", err, out)
	}
	return string(out)
}

// wantLines checks that out has a line matching each pattern.
func wantLines(t *testing.T, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile("(?m)^" + p + "$").MatchString(out) {
			t.Errorf("no line matching %q in:\n%s", p, out)
		}
	}
}

// A rank asks for a spare: ftrun starts world rank n (2) with the payload
// in FTRMA_SPAWN; the spare gets the live ranks' addresses (not the other
// spare's) and an empty roster; every live rank hears of it with its
// address and the payload, the asker before its answer [2]; asking for
// more than is left fails with ErrSpawn and says how many are left.
func TestRespawnSpawnAndAdmit(t *testing.T) {
	out := runRespawn(t, -1, "--respawn=2")
	wantLines(t, out,
		`rank 0 spawn x: \[2\] <nil>`,
		`rank 2 payload x live true,true,true,false`,
		`rank 2 roster \[\] <nil>`,
		`rank 0 admitted 2 spare2 x`,
		`rank 1 admitted 2 spare2 x`,
		`rank 0 spawn 2 more: \[\] spawn error true: .*asked for 2 spare ranks; 1 of --respawn=2 left`,
		`ftrun: started spare rank 2 at rank 0's request at .*`,
	)
}

// A spare that exits before it joins: the asker gets an error that says
// so, nobody is admitted it or told of its exit, and the next spare (3)
// still starts; the job's exit status is 0 (the spare is no survivor).
func TestRespawnSpareDiesBeforeJoining(t *testing.T) {
	out := runRespawn(t, 2, "--respawn=2")
	wantLines(t, out,
		`rank 0 spawn x: \[\] .*spare rank 2 exited with status 3 before it joined`,
		`rank 0 spawn y: \[3\] <nil>`,
		`rank 3 payload y live true,true,false,true`,
		`rank 0 admitted 3 spare3 y`,
		`rank 1 admitted 3 spare3 y`,
		`rank 0 spawn 2 more: \[\] spawn error true: .*asked for 2 spare ranks; 0 of --respawn=2 left`,
	)
}

// Without --respawn the job has no spares: FTRMA_SIZE is n, and Spawn
// fails at once with ErrNoSpares.
func TestRespawnWithoutSpares(t *testing.T) {
	out := runRespawn(t, -1)
	wantLines(t, out,
		`rank 0 without spares: \[\] no spares true: .*no spare ranks.*`,
		`rank 1 without spares: \[\] no spares true: .*no spare ranks.*`,
	)
}
