package launcher

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/launcher/internal/members"
)

// Host membership. ftrun and the agents of a multi-host job form one
// memberlist group (launcher/internal/members: SWIM with Lifeguard, gossip sealed
// with a key derived from the job's root secret, LAN timing that declares a
// vanished host dead in about 1.5 s). When the group declares an agent's
// host dead and the agent's link has been silent for two pings too (a
// verdict against a link that is alive is false, and ignored), ftrun cuts
// that agent's link at once: every rank of the host
// counts as failed together, each survivor gets one exit notice per rank,
// and the agent, should it still run, kills its ranks when it finds its
// link gone. The link's own pings bound the same within linkTimeout should
// gossip not reach a verdict first. Rank failures stay the ranks' own
// heartbeat detector's business: this layer sees hosts only.
//
// On the link, before the launch, ftrun sends
//
//	L→A  members  key [32], ftrun's group address string, the member name
//	              the agent takes string, timing scale uint32 (per mille)
//
// and the agent joins the group from its link's local address.

// msgMembers is the agent protocol's members message (see above).
const msgMembers byte = 20

// joinTimeout bounds an agent's join of the group; leaveTimeout the
// graceful leave at the end of a job (the job is over: a member that does
// not get the notice in time sees the leaver die instead, and nothing
// acts on that any more).
const (
	joinTimeout  = 2 * time.Second
	leaveTimeout = 100 * time.Millisecond
)

// memberName is the group member name of the agent of host label.
func memberName(label string) string { return "host " + label }

// startMembers starts ftrun's member of the job's group and tells every
// agent to join it. A group that cannot start leaves the job to the links'
// pings, said with -v.
func (j *Job) startMembers(root []byte) {
	key := members.DeriveKey(root, "ftrma members v1")
	byName := make(map[string]*agentLink)
	for _, l := range j.links {
		byName[memberName(l.addr)] = l
	}
	logger := slog.New(slog.DiscardHandler)
	if j.opts.Verbose {
		logger = logfLogger(j.out.reportf, "members: ", slog.LevelInfo)
	}
	g, err := members.Start(members.Config{
		Name: "ftrun", BindAddr: j.links[0].localIP(), Key: key, Logger: logger, Timing: scaledMembers(j.tm.scale),
		OnDead: func(name string, _ []byte) {
			if l := byName[name]; l != nil {
				l.hostDead()
			}
		},
	})
	if err != nil {
		j.out.reportf("host membership unavailable (%v): hosts are watched by their links' pings only", err)
		return
	}
	j.members = g
	for _, l := range j.links {
		msg := membersMsg{key: key, addr: g.Addr(), name: memberName(l.addr), milli: uint32(j.tm.scale * 1000)}.append(nil)
		l.conn.SetWriteDeadline(time.Now().Add(agentTimeout))
		jobwire.WriteFrame(l.conn, msgMembers, msg) // a failed write fails the launch next
		l.conn.SetWriteDeadline(time.Time{})
	}
}

// scaledMembers is the group's default timing stretched by scale
// (hostTiming).
func scaledMembers(scale float64) members.Timing {
	t := members.DefaultTiming()
	d := func(x *time.Duration) { *x = time.Duration(float64(*x) * scale) }
	d(&t.ProbeInterval)
	d(&t.ProbeTimeout)
	d(&t.GossipInterval)
	d(&t.StreamTimeout)
	return t
}

// stopMembers leaves the group.
func (j *Job) stopMembers() {
	if j.members != nil {
		j.members.Leave(leaveTimeout)
		j.members.Shutdown()
	}
}

// agentJoin is the agent's side of msgMembers: it joins the group from
// local, its link's local address. The agent takes no action on the
// group's verdicts: its link to ftrun, which pings, is what tells it ftrun
// is gone, and the ranks' leases keep a cut-off side from acting. The
// caller shuts the group down after the job.
func agentJoin(p []byte, local net.Addr, logf func(string, ...any)) (*members.Group, error) {
	m, err := parseMembersMsg(p)
	if err != nil {
		return nil, err
	}
	addr, name, milli := m.addr, m.name, m.milli
	g, err := members.Start(members.Config{
		Name: name, BindAddr: addrIP(local), Key: m.key, Timing: scaledMembers(max(1, float64(milli)/1000)),
		// Suspicions and deaths only: members makes them warnings.
		Logger: logfLogger(logf, "members: ", slog.LevelWarn),
	})
	if err != nil {
		return nil, err
	}
	if err := g.Join([]string{addr}, joinTimeout); err != nil {
		g.Shutdown()
		return nil, err
	}
	return g, nil
}

// membersMsg is what msgMembers carries: the group's key, the address to
// join at, the agent's member name and the group's time scale (1000: 1×).
type membersMsg struct {
	key        []byte
	addr, name string
	milli      uint32
}

// append appends the msgMembers payload of m to b.
func (m membersMsg) append(b []byte) []byte {
	b = appendString(appendString(append(b, m.key...), m.addr), m.name)
	return binary.BigEndian.AppendUint32(b, m.milli)
}

// parseMembersMsg reads a msgMembers payload.
func parseMembersMsg(p []byte) (membersMsg, error) {
	if len(p) < members.KeySize {
		return membersMsg{}, fmt.Errorf("%w: short members message", jobwire.ErrMalformed)
	}
	d := decoder{p: p[members.KeySize:]}
	m := membersMsg{key: p[:members.KeySize], addr: d.string(), name: d.string(), milli: d.uint32()}
	if err := d.end("members"); err != nil {
		return membersMsg{}, err
	}
	return m, nil
}
