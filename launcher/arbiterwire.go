package launcher

import (
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
	"github.com/ftrma/ftrma/launcher/internal/arbiter"
)

// The arbiter's messages on the agent link (ftrun --arbiter; see
// arbiterjob.go), before the launch and after members and outfiles:
//
//	L→A  arbiter listen  empty: listen for the job's arbiter mesh on this
//	                     host's address (the agent's side of its link to
//	                     ftrun), port 0
//	A→L  arbiter addr    addr string, text string: where the agent listens
//	                     (host:port), or text, why it cannot (addr empty)
//	L→A  arbiter config  the agent's node of the job's arbiter (below)
//
// and on the mesh's own connections (arbiterlink.go):
//
//	D→A  arbiter label   before TLS: node uint32, the dialling node's id
//	both arbiter msg     one arbiter.Message (arbiter.Message.AppendBinary)
//	both ping            empty, every ping interval of the mesh
//
// An arbiter config is
//
//	node uint32                  this agent's node id
//	names strings                the job's hosts by index (0: ftrun's), for
//	                             logs; their count is the job's host count
//	voters count × uint32        the voting nodes
//	ranks count × uint32         RankHost: the host index of each rank
//	tick, lease term, margin, max delay: uint64 each (nanoseconds)
//	election, heartbeat, renew ticks: uint32 each
//	max drift uint32             parts per million
//	peers count × (id uint32, addr string, key [32])
//	                             every other node: where it listens and the
//	                             key of this node's pair with it
//	log dir string               where to write this node's log too
//	                             (--output-filename's DIR/1), or empty
//
// Every field is checked (parseArbiterConfig) and the configuration must
// pass arbiter.Config.Validate; the agent runs no arbiter otherwise, and
// the job goes on without it.
const (
	msgArbiterListen byte = 36 // L→A: listen for the arbiter mesh
	msgArbiterAddr   byte = 37 // A→L: the answer to msgArbiterListen
	msgArbiterConfig byte = 38 // L→A: the agent's arbiter node
	msgArbiterLabel  byte = 39 // node→node, before TLS: the dialler's node id
	msgArbiterMsg    byte = 40 // node→node: one arbiter message
	// node→node: the leader's node asks the node of a rank's host whether
	// the rank still acts (payload: rank uint32). That node answers with
	// msgArbiterProbeAnswer (rank uint32, state byte): at once probeHeard
	// (it has the probe and is finding out), then, once it knows,
	// probeAlive or probeNotAlive (see arbDriver's Probes).
	msgArbiterProbe       byte = 41
	msgArbiterProbeAnswer byte = 42
)

// The states of a msgArbiterProbeAnswer.
const (
	probeNotAlive byte = 0
	probeAlive    byte = 1
	probeHeard    byte = 2
)

// probeAnswerPayload encodes a msgArbiterProbeAnswer.
func probeAnswerPayload(r ftrma.Rank, state byte) []byte {
	return append(jobwire.RankPayload(r), state)
}

// parseProbeAnswer decodes a msgArbiterProbeAnswer.
func parseProbeAnswer(p []byte) (ftrma.Rank, byte, error) {
	if len(p) != 5 || p[4] > probeHeard {
		return 0, 0, fmt.Errorf("%w: probe answer of %d bytes", jobwire.ErrMalformed, len(p))
	}
	r, err := jobwire.ParseRank(p[:4], supMaxRank)
	return r, p[4], err
}

// maxArbiterHosts bounds the hosts of an arbiter config.
const maxArbiterHosts = 1 << 16

// maxArbiterDuration bounds every duration of an arbiter config.
const maxArbiterDuration = time.Hour

// arbiterConfigMsg is a msgArbiterConfig.
type arbiterConfigMsg struct {
	node                                 uint64
	names                                []string // by host index; len is the job's host count
	voters                               []uint64
	rankHost                             []int
	tick, lease, margin, maxDelay        time.Duration
	electionTicks, heartbeatTicks, renew int
	driftPPM                             uint32
	peers                                []arbiterPeer
	logDir                               string
	// spareEnv is, in a job with spares, the FTRMA_ variables every rank
	// gets alike: an agent starts a spare with them once ftrun is gone
	// (agentspare.go).
	spareEnv []string
}

// arbiterPeer is another node of the mesh, as one node sees it.
type arbiterPeer struct {
	id   uint64
	addr string // host:port
	key  []byte // the pair's key (arbiterPairKey)
}

// arbiterPairKey is the key of the mesh link between nodes a and b, the
// same both ways: derived from the job's root secret, which only ftrun
// holds. Each agent gets the keys of its own pairs only, so a node that
// authenticates on a link is one of the link's two nodes.
func arbiterPairKey(root []byte, a, b uint64) []byte {
	return seclink.DeriveKey(root, fmt.Sprintf("ftrma arbiter link %d-%d", min(a, b), max(a, b)))
}

// arbiterMsgFor is the arbiter config of node id in a job whose nodes'
// common config is cfg (defaults applied), nodes listening at addrs (by
// host index) with keys from root.
func arbiterMsgFor(id uint64, cfg arbiter.Config, names, addrs []string, root []byte, logDir string) arbiterConfigMsg {
	c := cfg.WithDefaults()
	m := arbiterConfigMsg{
		node: id, names: names, voters: c.Voters, rankHost: c.RankHost,
		tick: c.Tick, lease: c.LeaseTerm, margin: c.Margin, maxDelay: c.MaxDelay,
		electionTicks: c.ElectionTicks, heartbeatTicks: c.HeartbeatTicks, renew: c.RenewTicks,
		driftPPM: uint32(c.MaxDrift*1e6 + 0.5), logDir: logDir,
	}
	if m.voters == nil {
		m.voters = arbiter.DefaultVoters(len(names))
	}
	for h, a := range addrs {
		if p := uint64(h + 1); p != id {
			m.peers = append(m.peers, arbiterPeer{id: p, addr: a, key: arbiterPairKey(root, id, p)})
		}
	}
	return m
}

// config is the node's arbiter.Config.
func (m arbiterConfigMsg) config() arbiter.Config {
	return arbiter.Config{
		ID: m.node, Hosts: len(m.names), Voters: m.voters, RankHost: m.rankHost,
		Tick: m.tick, ElectionTicks: m.electionTicks, HeartbeatTicks: m.heartbeatTicks,
		LeaseTerm: m.lease, Margin: m.margin, RenewTicks: m.renew, MaxDelay: m.maxDelay,
		MaxDrift: float64(m.driftPPM) / 1e6,
	}
}

func (m arbiterConfigMsg) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(m.node))
	b = appendStrings(b, m.names)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.voters)))
	for _, v := range m.voters {
		b = binary.BigEndian.AppendUint32(b, uint32(v))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.rankHost)))
	for _, h := range m.rankHost {
		b = binary.BigEndian.AppendUint32(b, uint32(h))
	}
	for _, d := range []time.Duration{m.tick, m.lease, m.margin, m.maxDelay} {
		b = binary.BigEndian.AppendUint64(b, uint64(d))
	}
	for _, n := range []int{m.electionTicks, m.heartbeatTicks, m.renew} {
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	b = binary.BigEndian.AppendUint32(b, m.driftPPM)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.peers)))
	for _, p := range m.peers {
		b = binary.BigEndian.AppendUint32(b, uint32(p.id))
		b = appendString(b, p.addr)
		b = append(b, p.key...)
	}
	b = appendString(b, m.logDir)
	return appendStrings(b, m.spareEnv)
}

// parseArbiterConfig decodes and checks a msgArbiterConfig: the format,
// the ranges, one peer per other node with a well-formed address and a
// key, and arbiter.Config.Validate. Errors wrap jobwire.ErrMalformed.
func parseArbiterConfig(p []byte) (arbiterConfigMsg, error) {
	d := decoder{p: p}
	m := arbiterConfigMsg{node: uint64(d.uint32()), names: d.strings()}
	for range d.count(4) {
		m.voters = append(m.voters, uint64(d.uint32()))
	}
	n := d.count(4)
	m.rankHost = make([]int, 0, n)
	for range n {
		m.rankHost = append(m.rankHost, int(d.uint32()))
	}
	var durs [4]time.Duration
	for i := range durs {
		v := d.uint64()
		if v > uint64(maxArbiterDuration) {
			d.failf("arbiter config: a duration of %d ns", v)
		}
		durs[i] = time.Duration(v)
	}
	m.tick, m.lease, m.margin, m.maxDelay = durs[0], durs[1], durs[2], durs[3]
	m.electionTicks, m.heartbeatTicks, m.renew = int(d.uint32()), int(d.uint32()), int(d.uint32())
	m.driftPPM = d.uint32()
	for range d.count(4 + 4 + seclink.KeySize) {
		m.peers = append(m.peers, arbiterPeer{id: uint64(d.uint32()), addr: d.string(), key: d.bytes(seclink.KeySize)})
	}
	m.logDir = d.string()
	m.spareEnv = d.strings()
	if err := d.end("arbiter config"); err != nil {
		return arbiterConfigMsg{}, err
	}
	if err := m.check(); err != nil {
		return arbiterConfigMsg{}, fmt.Errorf("%w: arbiter config: %v", jobwire.ErrMalformed, err)
	}
	return m, nil
}

// check checks what the format does not.
func (m arbiterConfigMsg) check() error {
	hosts := len(m.names)
	switch {
	case hosts < 2 || hosts > maxArbiterHosts:
		return fmt.Errorf("%d hosts", hosts)
	case m.node < 1 || m.node > uint64(hosts):
		return fmt.Errorf("node %d of %d", m.node, hosts)
	case len(m.peers) != hosts-1:
		return fmt.Errorf("%d peers for %d hosts", len(m.peers), hosts)
	case m.logDir != "" && !filepath.IsAbs(m.logDir):
		return fmt.Errorf("log directory %q is not absolute", jobwire.Printable([]byte(m.logDir)))
	case m.driftPPM >= 1e6:
		return fmt.Errorf("drift of %d ppm", m.driftPPM)
	}
	for _, kv := range m.spareEnv {
		if !strings.HasPrefix(kv, "FTRMA_") || !strings.Contains(kv, "=") {
			return fmt.Errorf("spare environment entry %q is not an FTRMA_ variable", jobwire.Printable([]byte(kv)))
		}
	}
	for r, h := range m.rankHost {
		if h >= hosts {
			return fmt.Errorf("rank %d on host %d of %d", r, h, hosts)
		}
	}
	seen := make(map[uint64]bool)
	for _, p := range m.peers {
		if p.id < 1 || p.id > uint64(hosts) || p.id == m.node || seen[p.id] {
			return fmt.Errorf("peer %d repeated, this node's, or not in [1, %d]", p.id, hosts)
		}
		seen[p.id] = true
		if host, port, err := net.SplitHostPort(p.addr); err != nil || host == "" || port == "" {
			return fmt.Errorf("peer %d: address %q", p.id, jobwire.Printable([]byte(p.addr)))
		}
	}
	if err := m.config().Validate(); err != nil {
		return err
	}
	return nil
}

// arbiterAddrMsg is a msgArbiterAddr.
type arbiterAddrMsg struct {
	addr string // host:port, or "" when text says why not
	text string
}

func (m arbiterAddrMsg) append(b []byte) []byte {
	return appendString(appendString(b, m.addr), m.text)
}

func parseArbiterAddr(p []byte) (arbiterAddrMsg, error) {
	d := decoder{p: p}
	m := arbiterAddrMsg{addr: d.string(), text: jobwire.Printable([]byte(d.string()))}
	if err := d.end("arbiter addr"); err != nil {
		return arbiterAddrMsg{}, err
	}
	if m.addr == "" && m.text == "" {
		return arbiterAddrMsg{}, fmt.Errorf("%w: arbiter addr: neither an address nor why not", jobwire.ErrMalformed)
	}
	if m.addr != "" {
		if _, _, err := net.SplitHostPort(m.addr); err != nil {
			return arbiterAddrMsg{}, fmt.Errorf("%w: arbiter addr %q", jobwire.ErrMalformed, jobwire.Printable([]byte(m.addr)))
		}
	}
	return m, nil
}
