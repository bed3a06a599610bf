package launcher

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Failures to inject beside --kill (args.go has their flags):
//
//   - --pause RANK@T:D stops a rank's process group with SIGSTOP at T and
//     lets it go on with SIGCONT D later: a hung rank. ftrun does both for
//     its own ranks; for a rank on another host it sends the agent a pause
//     (agentwire.go), and the agent keeps the SIGCONT's timer, so that a
//     link lost meanwhile cannot leave the rank stopped (the agent kills
//     its ranks when the link is lost, and SIGKILL ends a stopped process).
//   - --kill-host HOST@T has HOST's agent SIGKILL every rank of the job
//     there, then itself, sending nothing more: the link breaks, memberlist
//     loses the host, as when a machine dies. ftrun's own host is refused:
//     the job depends on ftrun.
//   - --cut HOST@T[:HEAL] cuts HOST off from every other host of the job,
//     ftrun's included, with blackhole routes (/32 or /128) on both sides:
//     HOST's agent adds one to every other side's address, ftrun and every
//     other agent one to HOST's (one side alone would still let the first
//     packets of the other in). The addresses are those the job knows the
//     hosts by: an agent's link address, which is its ranks'
//     FTRMA_HOST_ADDR, and ftrun's address on each link. Every side gets
//     the schedule when the job starts and keeps its own timers (a cut link
//     cannot carry the heal), removes its routes HEAL later, and in any
//     case when the job ends there or the process ends (SIGINT, SIGTERM;
//     an agent killed by --kill-host removes its routes first). A job on
//     one host, an address shared by two sides, a loopback address, and
//     ftrun or an agent without CAP_NET_ADMIN are refused before any rank
//     starts.
//
// With --no-ft, a rank that any of them makes fail aborts the job, as a
// --kill does.

// usageError is a mistake in the command line found only once the hosts are
// known (Start): Main exits with ExitUsage for it.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// checkNetAdmin says why this process cannot add blackhole routes (a
// variable for tests).
var checkNetAdmin = netAdminErr

// hostInject is a --kill-host or --cut resolved to a host of the job.
type hostInject struct {
	block int // index in the job's blocks; -1: ftrun's own host
	kill  KillHostSpec
	cut   CutSpec
}

// planInjections checks o's injections against the job's hosts, before
// anything starts: ranks in range, hosts the job has (not ftrun's own for
// --kill-host), and for --cut a job on several hosts and a ftrun that may
// add routes.
func planInjections(o *Config, blocks []hostBlock) (kills, cuts []hostInject, err error) {
	for _, p := range o.Pauses {
		if p.Rank < 0 || int(p.Rank) >= o.N {
			return nil, nil, usageError{fmt.Errorf("--pause %v: no rank %d in a job of %d", p, p.Rank, o.N)}
		}
	}
	for _, k := range o.KillHosts {
		i, err := injectHost(k.Host, blocks)
		if err != nil {
			return nil, nil, usageError{fmt.Errorf("--kill-host %v: %w", k, err)}
		}
		if i < 0 {
			return nil, nil, usageError{fmt.Errorf("--kill-host %v: %s is ftrun's own host, and the job depends on ftrun running there: it cannot be killed (kill its ranks with --kill, or cut it off with --cut)", k, k.Host)}
		}
		kills = append(kills, hostInject{block: i, kill: k})
	}
	for _, c := range o.Cuts {
		if !multiHost(blocks) {
			return nil, nil, usageError{fmt.Errorf("--cut %v: the job runs on one host: there is no link between hosts to cut", c)}
		}
		i, err := injectHost(c.Host, blocks)
		if err != nil {
			return nil, nil, usageError{fmt.Errorf("--cut %v: %w", c, err)}
		}
		cuts = append(cuts, hostInject{block: i, cut: c})
	}
	if len(cuts) > 0 {
		if err := checkNetAdmin(); err != nil {
			return nil, nil, fmt.Errorf("--cut: ftrun cannot add blackhole routes on its host: %w", err)
		}
	}
	return kills, cuts, nil
}

// injectHost finds host name among blocks: the index of its remote block,
// or -1 for ftrun's own host (local, or a name of this host). A running
// agent of --hosts is named HOST:PORT, or HOST alone when only one agent
// runs there.
func injectHost(name string, blocks []hostBlock) (int, error) {
	if name == LocalHost {
		return -1, nil
	}
	found, matches := -1, 0
	for i, b := range blocks {
		if !b.remote() {
			continue
		}
		if name == b.name || name == b.addr {
			return i, nil
		}
		if h, _, err := net.SplitHostPort(b.addr); err == nil && h == name {
			found, matches = i, matches+1
		}
	}
	switch {
	case matches == 1:
		return found, nil
	case matches > 1:
		return 0, fmt.Errorf("%s names %d agents of --hosts: name one as HOST:PORT", name, matches)
	case isThisHost(name):
		return -1, nil
	}
	var known []string
	for _, b := range blocks {
		if b.remote() {
			known = append(known, b.label())
		}
	}
	self, _ := os.Hostname()
	return 0, fmt.Errorf("no host %s in the job; its hosts are %s, and ftrun's own (%s, or %s)",
		name, strings.Join(known, ", "), LocalHost, self)
}

// holes are the blackhole routes one side of a job (ftrun, or an agent)
// holds for its cuts, counted: two cuts may ask for the same route, and it
// stays until both healed.
type holes struct {
	mu     sync.Mutex
	n      map[netip.Addr]int
	closed bool
	add    func(netip.Addr) error // addBlackhole; tests replace them
	del    func(netip.Addr) error // delBlackhole
}

// errHolesClosed: a cut's timer fired as the job ended.
var errHolesClosed = errors.New("the job ended")

func newHoles() *holes {
	return &holes{n: make(map[netip.Addr]int), add: addBlackhole, del: delBlackhole}
}

// cut adds the routes to addrs (those held already only count once more);
// it reports the ones it could not add. After close it adds nothing.
func (h *holes) cut(addrs []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errHolesClosed
	}
	var errs []error
	for _, a := range addrs {
		if h.n[a] == 0 {
			if err := h.add(a); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		h.n[a]++
	}
	return errors.Join(errs...)
}

// heal drops one count of the routes to addrs, removing those no other cut
// holds.
func (h *holes) heal(addrs []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, a := range addrs {
		switch h.n[a] {
		case 0: // never added, or removed by close
		case 1:
			delete(h.n, a)
			if err := h.del(a); err != nil {
				errs = append(errs, err)
			}
		default:
			h.n[a]--
		}
	}
	return errors.Join(errs...)
}

// close removes every route still held; cuts after it add nothing.
func (h *holes) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	var errs []error
	for a := range h.n {
		if err := h.del(a); err != nil {
			errs = append(errs, err)
		}
	}
	clear(h.n)
	return errors.Join(errs...)
}

// held lists the routes held, sorted (for tests and reports).
func (h *holes) held() []netip.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []netip.Addr
	for a := range h.n {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// cutPlan is a --cut resolved to routes: the addresses ftrun blackholes,
// and those each agent does.
type cutPlan struct {
	spec   CutSpec
	label  string // the cut host, for reports
	ftrun  []netip.Addr
	agents map[*agentLink][]netip.Addr
}

// cutSide is one side of a job's links: ftrun (link nil) or an agent, with
// the addresses the job knows it by.
type cutSide struct {
	link  *agentLink
	label string
	addrs []netip.Addr
}

// linkAddr parses the IP of a link's end.
func linkAddr(a net.Addr) netip.Addr {
	ip, _ := netip.ParseAddr(addrIP(a))
	return ip.Unmap()
}

// jobSides is ftrun's side (its address on every link) and every agent's
// (its link's remote address, where its ranks listen).
func jobSides(links []*agentLink) []cutSide {
	ftrun := cutSide{label: "ftrun's host"}
	sides := []cutSide{{}}
	for _, l := range links {
		if a := linkAddr(l.conn.LocalAddr()); !slices.Contains(ftrun.addrs, a) {
			ftrun.addrs = append(ftrun.addrs, a)
		}
		sides = append(sides, cutSide{link: l, label: l.block.label(), addrs: []netip.Addr{linkAddr(l.conn.RemoteAddr())}})
	}
	sides[0] = ftrun
	return sides
}

// planCut resolves cut c of host target (a link, or nil for ftrun's host)
// over the job's sides: the cut side blackholes every other side's
// addresses, every other side the cut side's. Addresses that cannot be
// cut apart are refused.
func planCut(c CutSpec, target *agentLink, sides []cutSide) (*cutPlan, error) {
	var cut cutSide
	var others []netip.Addr
	for _, s := range sides {
		for _, a := range s.addrs {
			if !a.IsValid() || a.IsLoopback() || a.IsUnspecified() {
				return nil, fmt.Errorf("--cut %v: %s is reached at %v: a cut needs every host of the job at an address of its own, not loopback", c, s.label, a)
			}
		}
		if s.link == target {
			cut = s
		} else {
			others = append(others, s.addrs...)
		}
	}
	for _, s := range sides {
		if s.link == target {
			continue
		}
		for _, a := range s.addrs {
			if slices.Contains(cut.addrs, a) {
				return nil, fmt.Errorf("--cut %v: %s and %s are both at %v: a blackhole route cannot cut them apart", c, cut.label, s.label, a)
			}
		}
	}
	slices.SortFunc(others, netip.Addr.Compare)
	others = slices.Compact(others)
	p := &cutPlan{spec: c, label: cut.label, agents: make(map[*agentLink][]netip.Addr)}
	for _, s := range sides {
		mine := cut.addrs
		if s.link == target {
			mine = others
		}
		if s.link == nil {
			p.ftrun = mine
		} else {
			p.agents[s.link] = mine
		}
	}
	return p, nil
}

// prepareCuts plans the job's cuts once its agents are connected, and asks
// every agent whether it can add routes: before any rank starts.
func (j *Job) prepareCuts(cuts []hostInject, blocks []hostBlock) error {
	if len(cuts) == 0 {
		return nil
	}
	sides := jobSides(j.links)
	for _, c := range cuts {
		var target *agentLink
		if c.block >= 0 {
			target = blocks[c.block].link
		}
		p, err := planCut(c.cut, target, sides)
		if err != nil {
			return usageError{err}
		}
		j.cuts = append(j.cuts, p)
	}
	for _, l := range j.links {
		if err := l.checkCut(); err != nil {
			return fmt.Errorf("--cut: %w", err)
		}
	}
	j.holes = newHoles()
	return nil
}

// armInjections starts the timers of --pause, --kill-host and --cut once
// every rank has started, and sends every agent its side of each cut, with
// its own timers. j.mu is held.
func (j *Job) armInjectionsLocked(kills []hostInject) {
	for _, p := range j.opts.Pauses {
		j.timers = append(j.timers, time.AfterFunc(p.At, func() { j.pause(p) }))
	}
	for _, k := range kills {
		l := j.blocks[k.block].link
		j.timers = append(j.timers, time.AfterFunc(k.kill.At, func() { j.killHost(k.kill, l) }))
	}
	for _, c := range j.cuts {
		for l, addrs := range c.agents {
			l.send(msgCut, cutMsg{after: c.spec.At, heal: c.spec.Heal, addrs: addrs}.append(nil))
		}
		j.timers = append(j.timers, time.AfterFunc(c.spec.At, func() { j.cutNow(c) }))
		if c.spec.Heal > 0 {
			j.timers = append(j.timers, time.AfterFunc(c.spec.At+c.spec.Heal, func() { j.healNow(c) }))
		}
	}
}

// pause carries out one --pause: SIGSTOP now, SIGCONT p.For later, both
// here for a rank of this host, both by the rank's agent for a remote one.
func (j *Job) pause(p PauseSpec) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return
	}
	rp := j.ranks[p.Rank]
	if !rp.running {
		j.out.reportf("--pause %v: rank %d had already exited", p, p.Rank)
		return
	}
	if rp.link != nil {
		if !rp.link.alive() {
			j.out.reportf("--pause %v: rank %d's host %s was lost", p, p.Rank, rp.link.block.label())
			return
		}
		rp.link.send(msgPause, pauseMsg{rank: p.Rank, d: p.For}.append(nil))
		j.out.reportf("paused rank %d for %v (--pause %v): SIGSTOP now, SIGCONT by its agent on %s", p.Rank, p.For, p, rp.link.block.label())
		return
	}
	j.signalLocked(rp, syscall.SIGSTOP)
	j.out.reportf("paused rank %d for %v (--pause %v): SIGSTOP now", p.Rank, p.For, p)
	j.timers = append(j.timers, time.AfterFunc(p.For, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if rp.running { // reaped while stopped (declared failed): nothing to resume
			j.signalLocked(rp, syscall.SIGCONT)
			j.out.reportf("resumed rank %d (--pause %v): SIGCONT", p.Rank, p)
		}
	}))
}

// killHost carries out one --kill-host: the agent of l kills its ranks and
// itself; the link's loss then makes them count as failed.
func (j *Job) killHost(k KillHostSpec, l *agentLink) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return
	}
	if !l.alive() {
		j.out.reportf("--kill-host %v: host %s was lost already", k, l.block.label())
		return
	}
	var ranks []int
	for _, p := range j.ranks {
		if p.link == l && p.running {
			ranks = append(ranks, int(p.rank))
		}
	}
	l.send(msgKillHost, nil)
	j.out.reportf("killing host %s (--kill-host %v): its agent SIGKILLs its ranks %v and itself", l.block.label(), k, ranks)
}

// cutNow adds ftrun's routes of cut c; the agents add theirs by their own
// timers.
func (j *Job) cutNow(c *cutPlan) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return
	}
	if err := j.holes.cut(c.ftrun); errors.Is(err, errHolesClosed) {
		return
	} else if err != nil {
		j.out.reportf("--cut %v: %v", c.spec, err)
	}
	until := "until the job ends"
	if c.spec.Heal > 0 {
		until = fmt.Sprintf("for %v", c.spec.Heal)
	}
	j.out.reportf("cut %s off from the job's other hosts %s (--cut %v): blackhole routes here to %v, and on every side likewise", c.label, until, c.spec, c.ftrun)
}

// healNow removes ftrun's routes of cut c; the agents remove theirs.
func (j *Job) healNow(c *cutPlan) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return
	}
	if err := j.holes.heal(c.ftrun); err != nil {
		j.out.reportf("--cut %v: %v", c.spec, err)
	}
	j.out.reportf("healed %s's links (--cut %v): routes removed here and on every side", c.label, c.spec)
}

// removeHoles removes every route ftrun still holds: the job ended.
func (j *Job) removeHoles() {
	if j.holes == nil {
		return
	}
	if err := j.holes.close(); err != nil {
		j.out.reportf("%v (remove it by hand: ip route del blackhole ADDRESS)", err)
	}
}
