package startup

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/transport/memnet"
)

func TestReadEnvSpares(t *testing.T) {
	vars := goodEnv() // rank 2 of 4
	vars[jobwire.EnvSpares] = "2"
	vars[jobwire.EnvSpawn] = base64.StdEncoding.EncodeToString([]byte("replaces 1"))
	setJobEnv(t, vars)
	e, err := readEnv()
	if err != nil {
		t.Fatal(err)
	}
	if e.spares != 2 || !e.spawned || string(e.spawn) != "replaces 1" {
		t.Errorf("readEnv: spares %d, spawned %v, payload %q; want 2, true, %q", e.spares, e.spawned, e.spawn, "replaces 1")
	}
	// Rank 3 of 4 with spares 2 and 3: spare 2 ended before it joined.
	vars[jobwire.EnvRank], vars[jobwire.EnvSparesLost] = "3", "2"
	setJobEnv(t, vars)
	if e, err = readEnv(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.sparesLost, []ftrma.Rank{2}) || !slices.Equal(e.absent(), []ftrma.Rank{2}) {
		t.Errorf("readEnv with %s=2: lost %v, absent %v; want [2] and [2]", jobwire.EnvSparesLost, e.sparesLost, e.absent())
	}
	for _, bad := range []string{"3", "1", "2,2", "x", "2,"} {
		vars[jobwire.EnvSparesLost] = bad
		setJobEnv(t, vars)
		if _, err := readEnv(); err == nil || !strings.Contains(err.Error(), jobwire.EnvSparesLost) {
			t.Errorf("readEnv with %s=%q: %v, want an error naming it", jobwire.EnvSparesLost, bad, err)
		}
	}
	for _, tt := range []struct {
		name          string
		rank, spares  string
		spawn, wanted string
	}{
		{"a spare without its payload", "2", "2", "-", "FTRMA_SPAWN is unset"},
		{"a payload for a first rank", "1", "2", "eA==", "rank 1 is not a spare"},
		{"as many spares as ranks", "2", "4", "eA==", "want fewer spares"},
		{"negative spares", "2", "-1", "eA==", "FTRMA_SPARES"},
		{"payload not base64", "2", "2", "!!", "FTRMA_SPAWN"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vars := goodEnv()
			vars[jobwire.EnvRank], vars[jobwire.EnvSpares], vars[jobwire.EnvSpawn] = tt.rank, tt.spares, tt.spawn
			setJobEnv(t, vars)
			if _, err := readEnv(); err == nil || !strings.Contains(err.Error(), tt.wanted) {
				t.Errorf("readEnv: %v, want an error containing %q", err, tt.wanted)
			}
		})
	}
}

// admitRecorder is a transport that records its admissions in log.
type admitRecorder struct {
	*memnet.Transport
	log *eventLog
}

func (a admitRecorder) Admit(peer ftrma.Rank, addr string) error {
	a.log.add(fmt.Sprintf("transport admits %d at %s", peer, addr))
	return nil
}

type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// spawnSession is rank 0 of a job of 2 ranks and 2 spares on one end of a
// pipe whose other end, serve, plays ftrun; its transport records
// admissions in the log it returns.
func spawnSession(t *testing.T, spares int, serve func(c net.Conn)) (*Session, *eventLog) {
	t.Helper()
	rank, launcher := net.Pipe()
	log := new(eventLog)
	s := &Session{rank: 0, size: 2 + spares, conn: rank, term: time.Hour, stop: make(chan struct{}),
		asked: make(map[uint64]time.Time), expiry: time.Now().Add(time.Hour), spares: spares,
		spawnWait: make(map[uint32]chan<- jobwire.SpawnAnswer),
		t:         admitRecorder{memnet.New(2 + spares).Endpoint(0), log}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(launcher)
	}()
	s.watching.Add(1)
	go s.watch()
	t.Cleanup(func() { s.Close(); launcher.Close(); <-done })
	return s, log
}

// readSpawn reads frames until a spawn request.
func readSpawn(c net.Conn) (jobwire.SpawnRequest, error) {
	for {
		typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSuperFrame)
		if err != nil {
			return jobwire.SpawnRequest{}, err
		}
		if typ == jobwire.MsgSpawn {
			return jobwire.ParseSpawn(p, 64)
		}
	}
}

// SpawnNear's hint reaches ftrun with the request.
func TestSpawnNearSendsHint(t *testing.T) {
	got := make(chan jobwire.SpawnRequest, 1)
	s, _ := spawnSession(t, 2, func(c net.Conn) {
		q, err := readSpawn(c)
		if err != nil {
			return
		}
		got <- jobwire.SpawnRequest{K: q.K, Near: q.Near}
		jobwire.WriteFrame(c, jobwire.MsgSpawned, jobwire.SpawnAnswer{ID: q.ID, Ranks: []ftrma.Rank{2}}.Append(nil))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if ranks, err := s.SpawnNear(ctx, 1, []byte("p"), []ftrma.Rank{1}); err != nil || !reflect.DeepEqual(ranks, []ftrma.Rank{2}) {
		t.Fatalf("SpawnNear = %v, %v; want [2]", ranks, err)
	}
	if q := <-got; q.K != 1 || !reflect.DeepEqual(q.Near, []ftrma.Rank{1}) {
		t.Errorf("ftrun got k %d near %v; want 1 near [1]", q.K, q.Near)
	}
}

// Spawn sends the request and returns ftrun's answer; the admissions that
// came before it went to the transport, then to OnAdmit, in that order and
// before Spawn returned; admissions before OnAdmit wait for it.
func TestSpawnAnswerAndAdmissions(t *testing.T) {
	early := make(chan struct{})
	s, log := spawnSession(t, 2, func(c net.Conn) {
		// An admission before anyone listens.
		jobwire.WriteFrame(c, jobwire.MsgAdmit, jobwire.Admission{Rank: 2, Addr: "a2", Payload: []byte("p2")}.Append(nil))
		close(early)
		q, err := readSpawn(c)
		if err != nil {
			return
		}
		jobwire.WriteFrame(c, jobwire.MsgAdmit, jobwire.Admission{Rank: 3, Addr: "a3", Payload: q.Payload}.Append(nil))
		jobwire.WriteFrame(c, jobwire.MsgSpawned, jobwire.SpawnAnswer{ID: q.ID, Ranks: []ftrma.Rank{3}}.Append(nil))
	})
	<-early
	// Wait until the transport has it: the backlog then holds it.
	for deadline := time.Now().Add(testTimeout); len(log.get()) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	s.OnAdmit(func(r ftrma.Rank, addr string, payload []byte) {
		log.add(fmt.Sprintf("OnAdmit %d %s %s", r, addr, payload))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ranks, err := s.Spawn(ctx, 1, []byte("x"))
	if err != nil || !reflect.DeepEqual(ranks, []ftrma.Rank{3}) {
		t.Fatalf("Spawn = %v, %v; want [3]", ranks, err)
	}
	want := []string{"transport admits 2 at a2", "OnAdmit 2 a2 p2", "transport admits 3 at a3", "OnAdmit 3 a3 x"}
	if got := log.get(); !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// ftrun's refusal is an error wrapping ErrSpawn with its text, and the
// spares it admitted before it failed; a job without spares and a bad
// count fail at once; a cancelled context ends the wait.
func TestSpawnErrors(t *testing.T) {
	s, _ := spawnSession(t, 2, func(c net.Conn) {
		q, err := readSpawn(c)
		if err != nil {
			return
		}
		jobwire.WriteFrame(c, jobwire.MsgSpawned, jobwire.SpawnAnswer{ID: q.ID, Ranks: []ftrma.Rank{2}, Err: "spare rank 3 exited with status 3 before it joined"}.Append(nil))
		readSpawn(c) // never answered
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ranks, err := s.Spawn(ctx, 2, nil)
	if !errors.Is(err, ErrSpawn) || !strings.Contains(err.Error(), "spare rank 3 exited") || !reflect.DeepEqual(ranks, []ftrma.Rank{2}) {
		t.Errorf("Spawn = %v, %v; want [2] and ErrSpawn saying why", ranks, err)
	}
	if _, err := s.Spawn(ctx, 3, nil); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("Spawn of 3 of 2 spares: %v, want ErrInvalid", err)
	}
	if _, err := s.SpawnNear(ctx, 2, nil, []ftrma.Rank{1}); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("SpawnNear of 2 near 1 rank: %v, want ErrInvalid", err)
	}
	if _, err := s.SpawnNear(ctx, 1, nil, []ftrma.Rank{4}); !errors.Is(err, ftrma.ErrInvalid) {
		t.Errorf("SpawnNear near rank 4 of 4: %v, want ErrInvalid", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancelShort()
	if _, err := s.Spawn(short, 1, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Spawn without an answer: %v, want the context's error", err)
	}

	none, _ := spawnSession(t, 0, func(c net.Conn) { readSpawn(c) })
	if _, err := none.Spawn(ctx, 1, nil); !errors.Is(err, ErrNoSpares) {
		t.Errorf("Spawn in a job without spares: %v, want ErrNoSpares", err)
	}
}

// A spare's rendezvous: the address list leaves out the ranks not live,
// and the roster after it names the failed ones.
func TestSpareRendezvousRoster(t *testing.T) {
	addr := fakeLauncher(t, func(c net.Conn) {
		if _, err := jobwire.ServerHandshake(c, testSecret(1), jobwire.RendezvousHandshake, nil); err != nil {
			return
		}
		if _, _, err := jobwire.ReadFrame(c, jobwire.MaxPublish(4)); err != nil {
			return
		}
		list := []jobwire.Addr{jobwire.WholeAddr("a0"), {}, jobwire.WholeAddr("a2"), {}}
		jobwire.WriteFrame(c, jobwire.MsgAddrs, jobwire.AppendAddrs(nil, list, 2))
		jobwire.WriteFrame(c, jobwire.MsgRoster, jobwire.AppendRanks(nil, []ftrma.Rank{1}))
		jobwire.ReadFrame(c, jobwire.MaxSmallFrame) // until the rank closes
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	env := jobEnv{rank: 2, size: 4, rendezvous: addr, secret: testSecret(1), spares: 2, spawned: true, got: new(joinInfo)}
	c, addrs, err := rendezvous(ctx, env, jobwire.WholeAddr("a2"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if want := []string{"a0", "", "a2", ""}; !reflect.DeepEqual(addrs, want) {
		t.Errorf("addresses %q, want %q", addrs, want)
	}
	if !reflect.DeepEqual(env.got.failed, []ftrma.Rank{1}) {
		t.Errorf("roster %v, want [1]", env.got.failed)
	}
}
