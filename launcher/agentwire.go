package launcher

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
)

// The agent wire format, version 2: how ftrun drives the ftrun agent of a
// remote host. Frames as in internal/jobwire (length, type, payload), message
// types from the same append-only numbering.
//
// A link is a TCP connection under mutual TLS 1.3 (internal/seclink), one
// job per link. A running agent ("ftrun agent --listen") is dialled by
// ftrun, which first sends, before TLS,
//
//	L→A  label    the host ftrun takes the agent for (hostLabel), whose
//	              key both then prove (hostAgentKey, agentlink.go)
//
// An agent ftrun started ("ftrun agent --boot", boot.go) dials ftrun and
// first sends, before TLS,
//
//	A→L  label    the name of its link key (a host name, or "srun")
//
// and, inside TLS,
//
//	A→L  hello    its host name
//
// Then, L the launcher and A the agent:
//
//	L→A  members  (optional) the host group's key and address and the
//	              agent's member name (membership.go)
//	L→A  outfiles (optional: ftrun --output-filename) dir string, flags
//	              uint8 (1: --tag-output): the agent writes its ranks'
//	              output to files under dir (outfiles.go)
//	A→L  outready text: the answer to outfiles, sent once the agent has
//	              made dir/1 and can write there; text is why it cannot
//	              (naming its host and the path: the job then fails before
//	              any rank starts), empty when it can
//	L→A  arbiter listen, A→L arbiter addr, L→A arbiter config
//	              (optional: ftrun --arbiter) the job's arbiter node of the
//	              agent's host (arbiterwire.go)
//	L→A  launch   job string, program string, dir string, args strings,
//	              size uint32, count uint32, count × (rank uint32, env strings),
//	              link timeout uint32 (ms; 0: the default)
//	A→L  started  count uint32, count × (rank uint32, pid uint32): every rank
//	              of the launch runs
//
// and afterwards, until either side closes:
//
//	A→L  output   rank uint32, stream uint8 (1 stdout, 2 stderr), flags uint8
//	              (1: the data starts a line; 2: the stream ended after the
//	              data), data: a line of the rank's output, or a piece of one
//	A→L  exited   rank uint32, code int32 (-1 after a signal), signal uint32
//	              (0: none), text (why the rank could not be waited for; empty
//	              normally): the agent reaped the rank
//	L→A  signal   rank uint32, signal uint32: send it to the rank's process
//	              group if the rank has not been reaped
//	L→A  spawn    rank uint32, env strings: start one more rank of the job
//	              (a spare of ftrun --respawn), like those of the launch
//	A→L  spawned  rank uint32, pid uint32, text: the answer to spawn; text
//	              is why the rank could not be started (pid 0), empty when
//	              it runs. Its output and exit follow as for any rank
//	L→A  pause    rank uint32, duration uint64 (ns, > 0): stop the rank's
//	              process group (SIGSTOP) if it runs here, and let it go on
//	              (SIGCONT) after the duration: the agent keeps that timer,
//	              so that a lost link cannot leave the rank stopped (--pause)
//	L→A  kill-host  empty: SIGKILL every rank of the job here, remove the
//	              agent's blackhole routes, then SIGKILL the agent itself,
//	              with nothing more sent: the host died (--kill-host)
//	L→A  cut      after uint64 (ns), heal uint64 (ns, 0: until the job
//	              ends), addrs strings (at least one IP address, canonical
//	              text): after that long, blackhole routes to addrs on the
//	              agent's host, removed heal later, and in any case when the
//	              job ends here (--cut). The agent keeps both timers: the
//	              cut link cannot carry the heal
//	both ping     empty, every linkPing; linkTimeout without any frame means
//	              the other side is lost
//	any  error    as in internal/jobwire; sent instead of started when a rank
//	              cannot be started
//
// A job with --cut checks every agent first, after members and before the
// launch:
//
//	L→A  cut      empty: can the agent add blackhole routes?
//	A→L  cut      empty: it can (CAP_NET_ADMIN); else an error, why not
//
// where string is length uint32 then UTF-8 bytes, strings is count uint32
// then count strings. env holds only FTRMA_ variables: the agent's own
// environment is the base. A launch may hold no rank: the host is there for
// spares (ftrun --spare-hosts, or slots beyond -n). When the link closes or
// goes silent, the agent kills every rank of the job, spares included, with
// SIGKILL.
const maxLaunch = 4 << 20 // largest agent frame (the launch spec)

// Agent message types (continuing internal/jobwire's numbering).
const (
	msgLaunch  byte = 10 // L→A: the job's ranks on this host
	msgStarted byte = 11 // A→L: every rank runs
	msgOutput  byte = 12 // A→L: a piece of a rank's output
	msgExited  byte = 13 // A→L: a rank was reaped
	msgSignal  byte = 14 // L→A: signal a rank's process group
	// 1..9, 15, 16 are the rendezvous's (internal/jobwire).
	msgPing       byte = 17 // both ways, every linkPing: the link and its peer live
	msgAgentHello byte = 18 // A→L, first on a link an agent dialled: its host name
	msgLinkLabel  byte = 19 // before TLS, from the side that dialled: the name of the key (boot.go, agentlink.go)
	// 20 is membership.go's; 21..28 are the rendezvous's.
	msgSpawnRank   byte = 29 // L→A: start one more rank (a spare)
	msgSpawnedRank byte = 30 // A→L: the answer to msgSpawnRank
	msgPause       byte = 31 // L→A: stop a rank for a while (--pause)
	msgKillHost    byte = 32 // L→A: kill the host's ranks and the agent (--kill-host)
	msgCut         byte = 33 // L→A: a cut's schedule (--cut), or, before the launch, can the agent cut; A→L: it can
	msgOutputFiles byte = 34 // L→A: --output-filename
	msgOutputReady byte = 35 // A→L: the answer to msgOutputFiles
	// 36..40 are the arbiter's (arbiterwire.go).
	msgStdin byte = 41 // L→A: a piece of ftrun's standard input for a rank (stdin.go); empty: its end
)

// Output streams and flags of msgOutput.
const (
	streamStdout byte = 1
	streamStderr byte = 2

	outStart byte = 1 // the data starts a line
	outLast  byte = 2 // the stream ended after the data
)

// launchSpec is what a launch message carries.
type launchSpec struct {
	job   string
	prog  string // as given to ftrun; the agent looks it up on its host
	dir   string // ftrun's working directory, used by the agent if it exists there
	args  []string
	size  int
	ranks []launchRank
	// linkTimeout is the silence after which the agent counts the link
	// lost (hostTiming); 0 means the default, linkTimeout.
	linkTimeout time.Duration
	// export is ftrun's -x: NAME=VALUE entries added to the ranks' base
	// environment (never FTRMA_ variables: checkExport).
	export []string
	// bind is --bind-to core: each rank of the launch on a CPU of its own.
	bind bool
	// stdin lists the ranks of the launch that get ftrun's standard input
	// (--stdin, msgStdin); the others read /dev/null.
	stdin []ftrma.Rank
}

// timeout is the link timeout the launch asks for.
func (l *launchSpec) timeout() time.Duration {
	if l.linkTimeout <= 0 {
		return linkTimeout
	}
	return l.linkTimeout
}

// launchRank is one rank of a launch.
type launchRank struct {
	rank ftrma.Rank
	env  []string // FTRMA_ variables only
}

// rankList is the launch's ranks, for logs.
func (l *launchSpec) rankList() []ftrma.Rank {
	r := make([]ftrma.Rank, len(l.ranks))
	for i, lr := range l.ranks {
		r[i] = lr.rank
	}
	return r
}

func (l *launchSpec) append(b []byte) []byte {
	b = appendString(b, l.job)
	b = appendString(b, l.prog)
	b = appendString(b, l.dir)
	b = appendStrings(b, l.args)
	b = binary.BigEndian.AppendUint32(b, uint32(l.size))
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.ranks)))
	for _, r := range l.ranks {
		b = binary.BigEndian.AppendUint32(b, uint32(r.rank))
		b = appendStrings(b, r.env)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(l.linkTimeout/time.Millisecond))
	b = appendStrings(b, l.export)
	b = appendBool(b, l.bind)
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.stdin)))
	for _, r := range l.stdin {
		b = binary.BigEndian.AppendUint32(b, uint32(r))
	}
	return b
}

func parseLaunch(p []byte) (*launchSpec, error) {
	d := decoder{p: p}
	l := &launchSpec{job: d.string(), prog: d.string(), dir: d.string(), args: d.strings()}
	l.size = int(d.uint32())
	n := d.count(4 + 4)
	for range n {
		l.ranks = append(l.ranks, launchRank{rank: ftrma.Rank(d.uint32()), env: d.strings()})
	}
	l.linkTimeout = time.Duration(d.uint32()) * time.Millisecond
	l.export = d.strings()
	l.bind = d.bool()
	for range d.count(4) {
		l.stdin = append(l.stdin, ftrma.Rank(d.uint32()))
	}
	if err := d.end("launch"); err != nil {
		return nil, err
	}
	return l, nil
}

// rankPID is one entry of a started message.
type rankPID struct {
	rank ftrma.Rank
	pid  int
	cpu  int // the CPU it is bound to (--bind-to core), or -1
}

func appendStarted(b []byte, pids []rankPID) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(pids)))
	for _, p := range pids {
		b = binary.BigEndian.AppendUint32(b, uint32(p.rank))
		b = binary.BigEndian.AppendUint32(b, uint32(p.pid))
		b = binary.BigEndian.AppendUint32(b, uint32(int32(p.cpu)))
	}
	return b
}

func parseStarted(p []byte) ([]rankPID, error) {
	d := decoder{p: p}
	n := d.count(12)
	pids := make([]rankPID, 0, n)
	for range n {
		pids = append(pids, rankPID{rank: ftrma.Rank(d.uint32()), pid: int(d.uint32()), cpu: int(int32(d.uint32()))})
	}
	return pids, d.end("started")
}

// spawnRankMsg is a msgSpawnRank.
type spawnRankMsg struct {
	rank ftrma.Rank
	env  []string // FTRMA_ variables only
}

func (m spawnRankMsg) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(m.rank))
	return appendStrings(b, m.env)
}

func parseSpawnRank(p []byte) (spawnRankMsg, error) {
	d := decoder{p: p}
	m := spawnRankMsg{rank: ftrma.Rank(d.uint32()), env: d.strings()}
	return m, d.end("spawn")
}

// spawnedRankMsg is a msgSpawnedRank.
type spawnedRankMsg struct {
	rank ftrma.Rank
	pid  int
	text string // why the rank could not be started; "" when it runs
}

func (m spawnedRankMsg) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(m.rank))
	b = binary.BigEndian.AppendUint32(b, uint32(m.pid))
	return append(b, jobwire.ErrorText(m.text)...)
}

func parseSpawnedRank(p []byte) (spawnedRankMsg, error) {
	if len(p) < 8 {
		return spawnedRankMsg{}, fmt.Errorf("%w: spawned message of %d bytes", jobwire.ErrMalformed, len(p))
	}
	return spawnedRankMsg{
		rank: ftrma.Rank(binary.BigEndian.Uint32(p)),
		pid:  int(binary.BigEndian.Uint32(p[4:])),
		text: jobwire.Printable(p[8:]),
	}, nil
}

// outputFilesMsg is a msgOutputFiles.
type outputFilesMsg struct {
	dir string // absolute
	tag bool   // --tag-output
}

// outTag is outputFilesMsg's flag of --tag-output.
const outTag byte = 1

func (m outputFilesMsg) append(b []byte) []byte {
	b = appendString(b, m.dir)
	var flags byte
	if m.tag {
		flags |= outTag
	}
	return append(b, flags)
}

func parseOutputFiles(p []byte) (outputFilesMsg, error) {
	d := decoder{p: p}
	m := outputFilesMsg{dir: d.string()}
	if d.err == nil && len(d.p) == 1 {
		m.tag = d.p[0]&outTag != 0
		d.p = d.p[1:]
	} else {
		d.fail("output files flags")
	}
	if err := d.end("output files"); err != nil {
		return outputFilesMsg{}, err
	}
	if !filepath.IsAbs(m.dir) {
		return outputFilesMsg{}, fmt.Errorf("%w: output files directory %q is not absolute", jobwire.ErrMalformed, jobwire.Printable([]byte(m.dir)))
	}
	return m, nil
}

// outputMsg is a msgOutput.
type outputMsg struct {
	rank   ftrma.Rank
	stream byte
	flags  byte
	data   []byte
}

func (o outputMsg) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(o.rank))
	b = append(b, o.stream, o.flags)
	return append(b, o.data...)
}

func parseOutput(p []byte) (outputMsg, error) {
	if len(p) < 6 || p[4] != streamStdout && p[4] != streamStderr {
		return outputMsg{}, fmt.Errorf("%w: output message of %d bytes", jobwire.ErrMalformed, len(p))
	}
	return outputMsg{rank: ftrma.Rank(binary.BigEndian.Uint32(p)), stream: p[4], flags: p[5], data: p[6:]}, nil
}

// exitedMsg is a msgExited.
type exitedMsg struct {
	rank   ftrma.Rank
	code   int
	signal syscall.Signal
	text   string
	lost   string // not sent: set by the launcher when the agent's connection broke first
}

func (e exitedMsg) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(e.rank))
	b = binary.BigEndian.AppendUint32(b, uint32(int32(e.code)))
	b = binary.BigEndian.AppendUint32(b, uint32(e.signal))
	return append(b, jobwire.ErrorText(e.text)...)
}

func parseExited(p []byte) (exitedMsg, error) {
	if len(p) < 12 {
		return exitedMsg{}, fmt.Errorf("%w: exited message of %d bytes", jobwire.ErrMalformed, len(p))
	}
	return exitedMsg{
		rank:   ftrma.Rank(binary.BigEndian.Uint32(p)),
		code:   int(int32(binary.BigEndian.Uint32(p[4:]))),
		signal: syscall.Signal(binary.BigEndian.Uint32(p[8:])),
		text:   jobwire.Printable(p[12:]),
	}, nil
}

// signalPayload encodes a msgSignal.
func signalPayload(r ftrma.Rank, sig syscall.Signal) []byte {
	return binary.BigEndian.AppendUint32(jobwire.RankPayload(r), uint32(sig))
}

func parseSignal(p []byte) (ftrma.Rank, syscall.Signal, error) {
	if len(p) != 8 {
		return 0, 0, fmt.Errorf("%w: signal message of %d bytes", jobwire.ErrMalformed, len(p))
	}
	return ftrma.Rank(binary.BigEndian.Uint32(p)), syscall.Signal(binary.BigEndian.Uint32(p[4:])), nil
}

// pauseMsg is a msgPause.
type pauseMsg struct {
	rank ftrma.Rank
	d    time.Duration // > 0
}

func (m pauseMsg) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(m.rank))
	return binary.BigEndian.AppendUint64(b, uint64(m.d))
}

func parsePauseMsg(p []byte) (pauseMsg, error) {
	if len(p) != 12 {
		return pauseMsg{}, fmt.Errorf("%w: pause message of %d bytes", jobwire.ErrMalformed, len(p))
	}
	m := pauseMsg{rank: ftrma.Rank(binary.BigEndian.Uint32(p)), d: time.Duration(binary.BigEndian.Uint64(p[4:]))}
	if m.d <= 0 {
		return pauseMsg{}, fmt.Errorf("%w: pause of %v", jobwire.ErrMalformed, m.d)
	}
	return m, nil
}

func parseKillHostMsg(p []byte) error {
	if len(p) != 0 {
		return fmt.Errorf("%w: kill-host message of %d bytes", jobwire.ErrMalformed, len(p))
	}
	return nil
}

// cutMsg is a msgCut schedule (the check before the launch is empty).
type cutMsg struct {
	after, heal time.Duration // heal 0: until the job ends
	addrs       []netip.Addr  // at least one
}

func (m cutMsg) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(m.after))
	b = binary.BigEndian.AppendUint64(b, uint64(m.heal))
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.addrs)))
	for _, a := range m.addrs {
		b = appendString(b, a.String())
	}
	return b
}

func parseCutMsg(p []byte) (cutMsg, error) {
	d := decoder{p: p}
	m := cutMsg{after: time.Duration(d.uint64()), heal: time.Duration(d.uint64())}
	for _, s := range d.strings() {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.Is4In6() || a.String() != s {
			return cutMsg{}, fmt.Errorf("%w: cut message: %q is not an IP address in canonical form", jobwire.ErrMalformed, jobwire.Printable([]byte(s)))
		}
		m.addrs = append(m.addrs, a)
	}
	if err := d.end("cut"); err != nil {
		return cutMsg{}, err
	}
	if m.after < 0 || m.heal < 0 || len(m.addrs) == 0 {
		return cutMsg{}, fmt.Errorf("%w: cut after %v, heal %v, of %d addresses", jobwire.ErrMalformed, m.after, m.heal, len(m.addrs))
	}
	return m, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// decoder reads the fields of a payload; the first error sticks and later
// reads return zero values.
type decoder struct {
	p   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", jobwire.ErrMalformed, what)
	}
	d.p = nil
}

// failf sets the error to one of its own unless there is one.
func (d *decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{jobwire.ErrMalformed}, args...)...)
	}
	d.p = nil
}

func (d *decoder) uint64() uint64 {
	if len(d.p) < 8 {
		d.fail("integer")
		return 0
	}
	v := binary.BigEndian.Uint64(d.p)
	d.p = d.p[8:]
	return v
}

// bytes reads n bytes (a copy).
func (d *decoder) bytes(n int) []byte {
	if len(d.p) < n {
		d.fail("bytes")
		return nil
	}
	b := append([]byte(nil), d.p[:n]...)
	d.p = d.p[n:]
	return b
}

func (d *decoder) uint32() uint32 {
	if len(d.p) < 4 {
		d.fail("integer")
		return 0
	}
	v := binary.BigEndian.Uint32(d.p)
	d.p = d.p[4:]
	return v
}

// bool reads one byte that must be 0 or 1.
func (d *decoder) bool() bool {
	if len(d.p) < 1 || d.p[0] > 1 {
		d.fail("flag")
		return false
	}
	v := d.p[0] == 1
	d.p = d.p[1:]
	return v
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// count reads a count of entries of at least min bytes each, refusing counts
// the rest of the payload cannot hold.
func (d *decoder) count(min int) int {
	n := d.uint32()
	if uint64(n)*uint64(min) > uint64(len(d.p)) {
		d.fail("list")
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.uint32()
	if uint64(n) > uint64(len(d.p)) {
		d.fail("string")
		return ""
	}
	s := string(d.p[:n])
	d.p = d.p[n:]
	return s
}

func (d *decoder) strings() []string {
	n := d.count(4)
	ss := make([]string, 0, n)
	for range n {
		ss = append(ss, d.string())
	}
	return ss
}

// end returns the first error, or one if bytes are left over.
func (d *decoder) end(what string) error {
	if d.err == nil && len(d.p) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes after %s", jobwire.ErrMalformed, len(d.p), what)
	}
	return d.err
}
