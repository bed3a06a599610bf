package startup

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/multi"
	"github.com/ftrma/ftrma/transport/shm"
)

// hybridEnv is rank r of a shm+tcp job of size ranks with spares, local
// being FTRMA_LOCAL_RANKS; a spare (r >= size-spares) is spawned.
func hybridEnv(r ftrma.Rank, size, spares int, local ...ftrma.Rank) jobEnv {
	return jobEnv{rank: r, size: size, spares: spares, spawned: int(r) >= size-spares,
		transport: jobwire.TransportHybrid, localRanks: local}
}

// The plan of each rank of a job of 4 ranks and 2 spares, the ranks on two
// hosts ({0, 1} and {2, 3}) and the spares on the first.
func TestHybridPlan(t *testing.T) {
	A := multi.Absent
	for _, c := range []struct {
		name  string
		env   jobEnv
		want  hybridPlan
		route []int
	}{
		{"a first rank", hybridEnv(1, 6, 2, 0, 1),
			hybridPlan{"host-of-rank-0", []ftrma.Rank{0, 1, 4, 5}, []ftrma.Rank{4, 5}}, []int{0, 0, 1, 1, A, A}},
		{"a first rank on the other host", hybridEnv(2, 6, 2, 2, 3),
			hybridPlan{"host-of-rank-2", []ftrma.Rank{2, 3, 4, 5}, []ftrma.Rank{4, 5}}, []int{1, 1, 0, 0, A, A}},
		{"the first spare", hybridEnv(4, 6, 2, 0, 1, 4),
			hybridPlan{"host-of-rank-0", []ftrma.Rank{0, 1, 4, 5}, []ftrma.Rank{5}}, []int{0, 0, 1, 1, 0, A}},
		{"the second spare", hybridEnv(5, 6, 2, 0, 1, 4, 5),
			hybridPlan{"host-of-rank-0", []ftrma.Rank{0, 1, 4, 5}, nil}, []int{0, 0, 1, 1, 0, 0}},
		{"a spare on a host of spares only", hybridEnv(5, 6, 2, 5),
			hybridPlan{"host-of-rank-5", []ftrma.Rank{4, 5}, []ftrma.Rank{4}}, []int{1, 1, 1, 1, 1, 0}},
		{"no spares", hybridEnv(3, 4, 0, 2, 3),
			hybridPlan{"host-of-rank-2", []ftrma.Rank{2, 3}, nil}, []int{1, 1, 0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.env.hybridPlan()
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("plan %+v, want %+v", got, c.want)
			}
			if route := askedRoute(t, c.env, got); !reflect.DeepEqual(route, c.route) {
				t.Errorf("route %v, want %v", route, c.route)
			}
		})
	}
}

// reachesAll stands for tcp in a route: it reaches every rank (it is no
// transport.Reacher).
type reachesAll struct{ transport.Transport }

// askedRoute is the route joinHybrid asks its transports for: a shm
// transport opened as plan says (in a directory of the test's), then tcp.
func askedRoute(t *testing.T, env jobEnv, plan hybridPlan) []int {
	t.Helper()
	st, err := shm.Open(shm.Config{Rank: env.rank, Size: env.size, Job: "plan", Dir: t.TempDir(), Ranks: plan.shmRanks, Absent: plan.shmAbsent, Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	route, err := multi.AskRoute(env.size, env.absent(), st, reachesAll{})
	if err != nil {
		t.Fatal(err)
	}
	return route
}

// Over any placement, two started ranks agree on the path between them,
// and it is the one multi.Admit picks by the admitted rank's host name:
// shm exactly when their hosts' names are equal. Spares start in rank
// order, each on one of the hosts, and FTRMA_LOCAL_RANKS of a spare lists
// the first ranks of its host and the spares started there so far, as
// ftrun gives it.
func TestHybridPlanAgrees(t *testing.T) {
	const n, spares = 5, 3
	for _, c := range []struct {
		name   string
		hostOf []int // by rank, spares included; host 2 has spares only
	}{
		{"blocks", []int{0, 0, 0, 1, 1, 0, 1, 0}},
		{"alternating", []int{0, 1, 0, 1, 0, 1, 0, 0}},
		{"a host of spares", []int{0, 0, 1, 1, 1, 2, 2, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			size := n + spares
			plans := make([]hybridPlan, size)
			routes := make([][]int, size)
			for r := range size {
				var local []ftrma.Rank
				for q := range size {
					if c.hostOf[q] == c.hostOf[r] && (q < n || q <= r) {
						local = append(local, ftrma.Rank(q))
					}
				}
				env := hybridEnv(ftrma.Rank(r), size, spares, local...)
				plans[r] = env.hybridPlan()
				routes[r] = askedRoute(t, env, plans[r])
				if !slices.Contains(plans[r].shmRanks, ftrma.Rank(r)) {
					t.Errorf("rank %d: shm ranks %v lack it", r, plans[r].shmRanks)
				}
			}
			for a := range size {
				for b := range size {
					sameHost := c.hostOf[a] == c.hostOf[b]
					if (plans[a].host == plans[b].host) != sameHost {
						t.Errorf("ranks %d and %d: hosts %q and %q, same host %v", a, b, plans[a].host, plans[b].host, sameHost)
					}
					if a == b || b > a && b >= n {
						continue // b is absent at a: Admit routes it by host name
					}
					// b started before a, or is a first rank: a's route for it.
					if got, want := routes[a][b], map[bool]int{true: 0, false: 1}[sameHost]; got != want {
						t.Errorf("rank %d routes rank %d to %d, want %d", a, b, got, want)
					}
					if routes[a][b] == 0 && (!slices.Contains(plans[a].shmRanks, ftrma.Rank(b)) || slices.Contains(plans[a].shmAbsent, ftrma.Rank(b))) {
						t.Errorf("rank %d routes rank %d to shm, which does not serve it as started: ranks %v, absent %v", a, b, plans[a].shmRanks, plans[a].shmAbsent)
					}
					if routes[a][b] == 1 && slices.Contains(plans[a].shmRanks, ftrma.Rank(b)) && !slices.Contains(plans[a].shmAbsent, ftrma.Rank(b)) {
						t.Errorf("rank %d routes rank %d to tcp, but shm waits for it: ranks %v, absent %v", a, b, plans[a].shmRanks, plans[a].shmAbsent)
					}
				}
				for b := n; b < size; b++ {
					if b > a && routes[a][b] != multi.Absent {
						t.Errorf("rank %d routes spare %d, not started yet, to %d", a, b, routes[a][b])
					}
					if !slices.Contains(plans[a].shmRanks, ftrma.Rank(b)) {
						t.Errorf("rank %d: shm does not serve spare %d: %v", a, b, plans[a].shmRanks)
					}
				}
			}
		})
	}
}

// Spares are refused over no transport: over verbs and shm+tcp this join
// gets past the spares and fails later (no device here, or at the
// rendezvous nobody serves), never with a refusal of spares.
func TestJoinSparesTransports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, tr := range []string{jobwire.TransportVerbs, jobwire.TransportHybrid} {
		env := jobEnv{rank: 0, size: 3, spares: 1, rendezvous: "127.0.0.1:1", secret: testSecret(1), job: "5eed16", localSize: 2,
			transport: tr, lease: jobwire.LeaseTerm, localRanks: []ftrma.Rank{0, 1}}
		_, err := join(ctx, env, nopReceiver{})
		if err == nil || strings.Contains(err.Error(), "spare ranks") {
			t.Errorf("join over %s with spares: %v, want an error that is not a refusal of spares", tr, err)
		}
	}
}
