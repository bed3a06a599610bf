package arbiter

import (
	"fmt"
	"slices"
	"time"

	"github.com/ftrma/ftrma"
)

// The defaults of Config. LeaseTerm is the ranks' lease term today
// (jobwire.LeaseTerm); an election timeout of half a term keeps the take-over
// after the leader's host is lost within about three terms (VerdictBound).
const (
	DefaultTick           = 50 * time.Millisecond
	DefaultElectionTicks  = 10 // 500 ms at DefaultTick
	DefaultHeartbeatTicks = 2  // 100 ms at DefaultTick
	DefaultLeaseTerm      = time.Second
	DefaultMaxDrift       = 0.01
)

// MaxVoters is the most voters a Config may list: five tolerate two lost.
const MaxVoters = 5

// maxRank bounds the rank numbers a job may use (bootstrap and spares), so
// that a command from the log can never make the state allocate without
// bound.
const maxRank = 1 << 24

// Config is one node's configuration. Every node of a job must have the same
// one but for ID. The zero value of each duration and count field means its
// default; WithDefaults fills them and Validate checks the result.
type Config struct {
	// ID is this node: its host's index plus one. ftrun's host is host 0,
	// node 1.
	ID uint64
	// Hosts is the number of hosts of the job, one node each: node ids run
	// from 1 to Hosts.
	Hosts int
	// Voters lists the nodes that vote in raft: 1 to MaxVoters distinct
	// node ids, node 1 (ftrun's) always among them. The others are raft
	// learners: they get the log and hold host leases, but never vote or
	// lead. Nil means DefaultVoters(Hosts).
	Voters []uint64
	// RankHost is the job's membership at bootstrap: RankHost[r] is the
	// host (0-based) that rank r runs on. Ranks admitted later (spares) are
	// added by the log.
	RankHost []int

	// Tick is the interval at which the caller calls Node.Tick, by its own
	// clock. Zero means DefaultTick (50 ms).
	Tick time.Duration
	// ElectionTicks is raft's election timeout in ticks (a follower that
	// hears no leader for a random [ElectionTicks, 2·ElectionTicks) ticks
	// campaigns; a leader that heard from no quorum for ElectionTicks steps
	// down). ET = ElectionTicks·Tick is also the window within which a
	// leader must have heard from a quorum to grant host leases. Zero means
	// DefaultElectionTicks (10).
	ElectionTicks int
	// HeartbeatTicks is the interval of the leader's heartbeats, in ticks.
	// Zero means DefaultHeartbeatTicks (2); it must be below ElectionTicks.
	HeartbeatTicks int
	// LeaseTerm (T) is the length of a host lease, counted by the holder's
	// clock from the moment it sent its ask. Zero means DefaultLeaseTerm
	// (1 s).
	LeaseTerm time.Duration
	// Margin (M) is how much longer than a term the leader waits after its
	// last grant to a silent host before it declares it failed. It covers
	// clock rate differences (see MaxDrift) and a late check by the holder.
	// Zero means LeaseTerm/2, today's 1.5 terms.
	Margin time.Duration
	// RenewTicks is how often a node asks the leader for its host lease, in
	// ticks. Zero means an eighth of a term (at least 1 tick); it must not
	// exceed half a term.
	RenewTicks int
	// MaxDelay (D) is the longest one-way delay of a message between two
	// connected nodes that the bounds (VerdictBound, TakeoverBound) assume.
	// Safety does not depend on it. Zero means Tick.
	MaxDelay time.Duration
	// MaxDrift (ρ) bounds how far any node's clock rate may be from true
	// time: every clock advances between (1-ρ) and (1+ρ) seconds per second.
	// Safety depends on it through Margin (Validate checks the condition).
	// Zero means DefaultMaxDrift (1%).
	MaxDrift float64
}

// DefaultVoters returns the voters of a job of hosts hosts when the Config
// names none: node 1 (ftrun's) and the next nodes in order, up to MaxVoters,
// an odd number of them (an even count tolerates no more losses than the odd
// count below it and makes a tie of a split): 1 host or 2 → {1}; 3 or 4 →
// {1, 2, 3}; 5 and more → {1, ..., 5}.
func DefaultVoters(hosts int) []uint64 {
	v := min(max(hosts, 1), MaxVoters)
	if v%2 == 0 {
		v--
	}
	ids := make([]uint64, v)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	return ids
}

// WithDefaults returns c with every zero field replaced by its default. It
// does not validate.
func (c Config) WithDefaults() Config {
	if c.Voters == nil {
		c.Voters = DefaultVoters(c.Hosts)
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = DefaultElectionTicks
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if c.LeaseTerm == 0 {
		c.LeaseTerm = DefaultLeaseTerm
	}
	if c.Margin == 0 {
		c.Margin = c.LeaseTerm / 2
	}
	if c.RenewTicks == 0 && c.Tick > 0 {
		c.RenewTicks = max(1, int(c.LeaseTerm/8/c.Tick))
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = c.Tick
	}
	if c.MaxDrift == 0 {
		c.MaxDrift = DefaultMaxDrift
	}
	return c
}

// ElectionTimeout returns ET, ElectionTicks·Tick, with defaults applied.
func (c Config) ElectionTimeout() time.Duration {
	c = c.WithDefaults()
	return time.Duration(c.ElectionTicks) * c.Tick
}

// Validate reports whether c, with its defaults applied, is usable. Beyond
// the ranges of each field it checks the safety condition of the margin:
//
//	M ≥ 2ρ·(ET + T)/(1-ρ)
//
// (see the package documentation: a lease may outlast its grant by T/(1-ρ)
// in true time, a predecessor's grants may come up to ET/(1-ρ) after a new
// leader took office, and the leader's wait of ET + T + M may be as short as
// (ET + T + M)/(1+ρ)). Errors wrap ftrma.ErrInvalid.
func (c Config) Validate() error {
	d := c.WithDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("arbiter: "+format+": %w", append(args, ftrma.ErrInvalid)...)
	}
	switch {
	case d.Hosts < 1 || d.Hosts > maxRank:
		return bad("%d hosts", d.Hosts)
	case d.ID < 1 || d.ID > uint64(d.Hosts):
		return bad("node id %d of %d hosts (ids run from 1)", d.ID, d.Hosts)
	case len(d.Voters) < 1 || len(d.Voters) > MaxVoters:
		return bad("%d voters (1 to %d)", len(d.Voters), MaxVoters)
	case !slices.Contains(d.Voters, 1):
		return bad("voters %v leave out node 1 (ftrun's)", d.Voters)
	case len(d.RankHost) > maxRank:
		return bad("%d ranks", len(d.RankHost))
	case d.Tick <= 0 || d.LeaseTerm <= 0 || d.Margin < 0 || d.MaxDelay < 0:
		return bad("negative duration (Tick %v, LeaseTerm %v, Margin %v, MaxDelay %v)", d.Tick, d.LeaseTerm, d.Margin, d.MaxDelay)
	case d.HeartbeatTicks < 1 || d.ElectionTicks <= d.HeartbeatTicks:
		return bad("ElectionTicks %d must exceed HeartbeatTicks %d ≥ 1", d.ElectionTicks, d.HeartbeatTicks)
	case d.RenewTicks < 1 || time.Duration(d.RenewTicks)*d.Tick > d.LeaseTerm/2:
		return bad("RenewTicks %d of %v: renew at least every half term %v", d.RenewTicks, d.Tick, d.LeaseTerm/2)
	case d.MaxDrift < 0 || d.MaxDrift >= 0.5:
		return bad("MaxDrift %v", d.MaxDrift)
	}
	seen := make(map[uint64]bool, len(d.Voters))
	for _, v := range d.Voters {
		if v < 1 || v > uint64(d.Hosts) || seen[v] {
			return bad("voters %v: each a distinct node id of 1..%d", d.Voters, d.Hosts)
		}
		seen[v] = true
	}
	for r, h := range d.RankHost {
		if h < 0 || h >= d.Hosts {
			return bad("rank %d on host %d of %d", r, h, d.Hosts)
		}
	}
	et := time.Duration(d.ElectionTicks) * d.Tick
	if need := stretch(et+d.LeaseTerm, 2*d.MaxDrift/(1-d.MaxDrift)); d.Margin < need {
		return bad("Margin %v below 2ρ(ET+T)/(1-ρ) = %v (ρ %v, ET %v, T %v)", d.Margin, need, d.MaxDrift, et, d.LeaseTerm)
	}
	return nil
}

// stretch returns d·f, rounded up to the nanosecond.
func stretch(d time.Duration, f float64) time.Duration {
	x := float64(d) * f
	r := time.Duration(x)
	if float64(r) < x {
		r++
	}
	return r
}

// slow returns the longest true time that a local duration d can take on a
// clock whose rate is at least 1-ρ.
func slow(d time.Duration, rho float64) time.Duration { return stretch(d, 1/(1-rho)) }

// quiet is the longest true time from a host's cut until the leader, which
// stays leader and keeps its quorum, has the host's verdict applied at every
// connected node: the host's last ask arrives up to D after the cut, the
// leader waits T + M after it by its own clock and sees it at its next tick,
// and the commit takes a round trip to a quorum and one more message to the
// others (plus one D for the ask still on its way, counted above).
func quiet(c Config) time.Duration {
	return slow(c.LeaseTerm+c.Margin+c.Tick, c.MaxDrift) + 4*c.MaxDelay
}

// electionRound is the longest true time of one election attempt: a
// follower's timeout, raft's random [ET, 2·ET) ticks plus the tick it is
// noticed at, by its clock, then a pre-vote and a vote round trip.
func electionRound(c Config) time.Duration {
	et := time.Duration(c.ElectionTicks) * c.Tick
	return slow(2*et+c.Tick, c.MaxDrift) + 4*c.MaxDelay
}

// TakeoverBound returns the longest true time from the moment the leader's
// host is cut off (or its node dies) until another voter takes office,
// allowing the first election attempt to fail once: the followers' last
// message from the old leader arrives up to D after the cut, then two
// attempts of (2·ET + Tick)/(1-ρ) + 4·D each:
//
//	D + 2·((2·ET + Tick)/(1-ρ) + 4·D)
//
// An attempt fails when a voter refuses the pre-vote because it heard the
// old leader less than ET ticks before (raft's CheckQuorum lease: likely
// only when the candidate drew a timeout near ET, about one time in
// 2·ElectionTicks), or when two candidates split the votes. The simulator
// saw 3 take-overs in 600 need the second attempt and none a third
// (TestMeasureElection); each further failed attempt adds one more
// (2·ET + Tick)/(1-ρ) + 4·D. With a single voter there is no take-over and
// it returns 0.
func TakeoverBound(cfg Config) time.Duration {
	c := cfg.WithDefaults()
	if len(c.Voters) < 2 {
		return 0
	}
	return c.MaxDelay + 2*electionRound(c)
}

// VerdictBound returns the longest true time from the moment a host is cut
// off (or its node dies) until every node connected to a quorum has applied
// its HostFailed, assuming message delays up to MaxDelay among the others,
// clock rates within MaxDrift, and (when the lost host held the leader) that
// the first election succeeds. It is the larger of
//
//	(T + M + Tick)/(1-ρ) + 4·D                   the leader stays
//	TakeoverBound + (ET + T + M + Tick)/(1-ρ) + 3·D   the leader was on the host
//
// With a single voter only the first applies. The rest of the runtime
// derives its give-up times from this one (see the package documentation).
func VerdictBound(cfg Config) time.Duration {
	c := cfg.WithDefaults()
	b := quiet(c)
	if len(c.Voters) < 2 {
		return b
	}
	et := time.Duration(c.ElectionTicks) * c.Tick
	return max(b, TakeoverBound(c)+slow(et+c.LeaseTerm+c.Margin+c.Tick, c.MaxDrift)+3*c.MaxDelay)
}
