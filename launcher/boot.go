package launcher

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
)

// Agents that ftrun starts itself. For a host of a hostfile, -H list or
// Slurm allocation, ftrun starts "ftrun agent --boot" there, by ssh or by
// one srun step for all such hosts, and writes a boot line on the agent's
// standard input:
//
//	ftrma-boot1 JOB LABEL KEY ADDR,ADDR,...
//
// LABEL names the link key KEY (hex, 32 bytes): the host's name for ssh, a
// key derived from the job secret for that host alone, so a host never
// learns the job secret or another host's key; "srun" for the agents of a
// Slurm step, which all read the same line. ADDRs are ftrun's addresses the
// agent may reach it at. The agent dials back, sends LABEL in a frame of its
// own, and both sides run a mutual TLS 1.3 handshake keyed by KEY
// (internal/seclink); then the agent says hello (its host name) and the link
// goes on as with a running agent: launch, started, output, exits, signals,
// pings. The line never appears on a command line. Over ssh it travels in
// the ssh channel, encrypted. Slurm forwards a step's standard input
// unencrypted, so for srun the line is sealed first with munge (MUNGE's
// credential, encrypted and bound to this user, which "unmunge" on the node
// opens); without munge ftrun refuses to start agents through Slurm. Such
// an agent (--munge) obeys only a sealed line, and only one its own user
// sealed (anyone may seal a credential for another user: the sealer's uid
// is what tells). As every agent of the step holds the same key, the two
// sides of an srun link then prove with munge on which host each runs
// (hostproof.go): ftrun knows an agent's host from the node's own munged,
// not from what the agent says.
//
// An agent started so serves one job. It ends, killing its ranks, when the
// link closes or goes silent (linkTimeout) or its standard input closes
// (ssh or srun ended: ftrun is gone).

// How ftrun starts the agent of a host (hostBlock.start).
const (
	startSSH  = "ssh"
	startSrun = "srun"
)

const (
	bootMagic      = "ftrma-boot1"
	bootMungeMagic = "ftrma-boot1-munge"
	labelSrun      = "srun"
	maxBootLine    = 64 << 10
)

// linkKey derives the link key of label from the job's root secret.
func linkKey(root []byte, label string) []byte {
	return seclink.DeriveKey(root, "ftrma agent link "+label)
}

// bootLine is what an agent reads on its standard input.
type bootLine struct {
	job, label string
	key        []byte
	addrs      []string
}

func (b bootLine) String() string {
	return fmt.Sprintf("%s %s %s %s %s\n", bootMagic, b.job, b.label, hex.EncodeToString(b.key), strings.Join(b.addrs, ","))
}

func parseBootLine(s string) (bootLine, error) {
	f := strings.Fields(s)
	if len(f) != 5 || f[0] != bootMagic {
		return bootLine{}, errors.New("not an ftrun boot line (ftrun agent --boot is started by ftrun itself)")
	}
	key, err := hex.DecodeString(f[3])
	if err != nil || len(key) != 32 {
		return bootLine{}, errors.New("boot line: bad key")
	}
	return bootLine{job: f[1], label: f[2], key: key, addrs: strings.Split(f[4], ",")}, nil
}

// dialBack is ftrun's listener for the agents it starts, and the agents'
// starters.
type dialBack struct {
	ln    net.Listener
	root  []byte
	job   string
	out   *sink
	gate  *seclink.Gate
	links chan *agentLink

	mu        sync.Mutex
	starters  []*starter
	srunAddrs map[string]string // the addresses of the srun step's nodes (nodeAddrs)
}

// starter is one ssh or srun process that starts agents.
type starter struct {
	what  string // "ssh h2", "srun on h1,h2"
	hosts []string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	errs  tailBuffer
	done  chan struct{} // closed when cmd exited
	err   error         // cmd's exit, once done
}

// tailBuffer keeps the last tailBytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	cut bool // bytes were dropped from the front
}

const tailBytes = 8 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = t.buf[len(t.buf)-tailBytes:]
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// lines are the whole lines kept: the first is left out when bytes were
// dropped from the front (it is likely cut).
func (t *tailBuffer) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := strings.Split(strings.TrimRight(string(t.buf), "\n"), "\n")
	if t.cut && len(ls) > 0 {
		ls = ls[1:]
	}
	if len(ls) == 1 && ls[0] == "" {
		return nil
	}
	return ls
}

// reportLogs reports the last lines each starter printed, each line after
// the starter's name ("ssh h4: ftrun agent: ..."): the logs of the agents
// it started, which are the only account of what an agent did to its ranks
// (a rank it killed because it did not answer a probe, its arbiter node
// that stopped acting, a link to ftrun it lost). Called once the starters
// have ended (stop), for a job that did not end well or lost ranks.
func (d *dialBack) reportLogs(out *sink) {
	d.mu.Lock()
	starters := slices.Clone(d.starters)
	d.mu.Unlock()
	for _, s := range starters {
		for _, l := range s.errs.lines() {
			out.reportf("%s: %s", s.what, l)
		}
	}
}

// listenDialBack listens on every interface for agents dialling back.
func listenDialBack(root []byte, job string, out *sink) (*dialBack, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, fmt.Errorf("listen for agents: %w", err)
	}
	d := &dialBack{ln: ln, root: root, job: job, out: out, gate: seclink.NewGate(64), links: make(chan *agentLink, 64)}
	go d.acceptLoop()
	return d, nil
}

// addrs lists the addresses agents may dial: this host's non-loopback IPs
// (IPv4 first), then loopback, with the listener's port.
func (d *dialBack) addrs() []string {
	port := d.ln.Addr().(*net.TCPAddr).Port
	var v4, v6, lo []string
	ifaddrs, _ := net.InterfaceAddrs()
	for _, a := range ifaddrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		hp := net.JoinHostPort(ipn.IP.String(), fmt.Sprint(port))
		switch {
		case ipn.IP.IsLoopback():
			lo = append(lo, hp)
		case ipn.IP.To4() != nil:
			v4 = append(v4, hp)
		default:
			v6 = append(v6, hp)
		}
	}
	return slices.Concat(v4, v6, lo)
}

func (d *dialBack) close() {
	d.ln.Close()
}

func (d *dialBack) acceptLoop() {
	acceptEach(d.ln, nil, "agents' dial-back", d.out.reportf, func(c net.Conn) bool {
		go func() {
			l, err := d.admit(c)
			if err != nil {
				c.Close()
				d.out.reportf("refused an agent connection from %s: %v", c.RemoteAddr(), err)
				return
			}
			d.links <- l
		}()
		return true
	})
}

// admit authenticates an agent that dialled back and reads its hello.
func (d *dialBack) admit(c net.Conn) (*agentLink, error) {
	defer d.gate.Admit(c)()
	deadline := time.Now().Add(agentTimeout)
	c.SetDeadline(deadline)
	typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
	if err != nil {
		return nil, err
	}
	if typ != msgLinkLabel || len(p) == 0 || len(p) > 255 {
		return nil, errors.New("no link label")
	}
	tc, err := seclink.Server(c, linkKey(d.root, string(p)), deadline)
	if err != nil {
		return nil, err
	}
	tc.SetDeadline(deadline)
	typ, h, err := jobwire.ReadFrame(tc, jobwire.MaxSmallFrame)
	if err == nil {
		err = jobwire.ExpectFrom(typ, h, msgAgentHello, "hello", "agent")
	}
	host := string(h)
	if err == nil && string(p) == labelSrun {
		host, err = d.checkAgentHost(tc, host)
	}
	if err != nil {
		tc.Close()
		return nil, err
	}
	tc.SetDeadline(time.Time{})
	return &agentLink{addr: host, label: string(p), conn: tc, wake: make(chan struct{}, 1)}, nil
}

// checkAgentHost runs ftrun's side of the host proofs on an srun link
// (hostproof.go) and returns the node the agent runs on; said is the host
// name the agent said.
func (d *dialBack) checkAgentHost(tc *tls.Conn, said string) (string, error) {
	d.mu.Lock()
	addrs := d.srunAddrs
	d.mu.Unlock()
	typ, cred, err := jobwire.ReadFrame(tc, jobwire.MaxSmallFrame)
	if err == nil {
		err = jobwire.ExpectFrom(typ, cred, msgHostProof, "host proof", "agent")
	}
	if err != nil {
		return "", err
	}
	origin, err := checkProof(cred, proofAgentMagic, d.job, tc)
	if err != nil {
		return "", fmt.Errorf("agent saying it runs on %q: %w", jobwire.Printable([]byte(said)), err)
	}
	node, err := proofHost(origin, addrs)
	if err != nil {
		return "", fmt.Errorf("agent saying it runs on %q: %w", jobwire.Printable([]byte(said)), err)
	}
	if node != said {
		return "", fmt.Errorf("an agent on %s says it runs on %q: refused", node, jobwire.Printable([]byte(said)))
	}
	mine, err := makeProof(proofFtrunMagic, d.job, tc)
	if err == nil {
		err = jobwire.WriteFrame(tc, msgHostProof, mine)
	}
	return node, err
}

// proveHosts runs the agent's side of the host proofs (hostproof.go) on
// the link tc to ftrun, whose boot line was sealed on origin.
func proveHosts(tc *tls.Conn, job, origin string) error {
	mine, err := makeProof(proofAgentMagic, job, tc)
	if err == nil {
		err = jobwire.WriteFrame(tc, msgHostProof, mine)
	}
	if err != nil {
		return err
	}
	typ, cred, err := jobwire.ReadFrame(tc, jobwire.MaxSmallFrame)
	if err == nil {
		err = jobwire.ExpectFrom(typ, cred, msgHostProof, "host proof", "ftrun")
	}
	if err != nil {
		return err
	}
	from, err := checkProof(cred, proofFtrunMagic, job, tc)
	if err != nil {
		return err
	}
	if from != origin || origin == "" {
		return fmt.Errorf("host proof: ftrun's proof was sealed on %q, the boot line on %q: not the ftrun that started this agent", from, origin)
	}
	return nil
}

// startSSH starts the agent of host by ssh: ssh (the command line, e.g.
// ["ssh"] or ["ssh", "-F", "cfg"]) with BatchMode, the remote command
// agentPath agent --boot, and the boot line on its standard input.
func (d *dialBack) startSSH(ssh []string, host, agentPath string) error {
	args := append(slices.Clone(ssh[1:]), "-o", "BatchMode=yes", "-T", host, shellQuote(agentPath)+" agent --boot")
	line := bootLine{job: d.job, label: host, key: linkKey(d.root, host), addrs: d.addrs()}.String()
	return d.run("ssh "+host, []string{host}, ssh[0], args, line)
}

// startSrun starts the agents of hosts by one srun step, one task per host.
func (d *dialBack) startSrun(srun string, hosts []string, agentPath string) error {
	addrs, err := nodeAddrs(hosts, net.LookupHost)
	if err != nil {
		return fmt.Errorf("the addresses of the agents' hosts, to check their proofs: %w", err)
	}
	d.mu.Lock()
	d.srunAddrs = addrs
	d.mu.Unlock()
	line := bootLine{job: d.job, label: labelSrun, key: linkKey(d.root, labelSrun), addrs: d.addrs()}.String()
	sealed, err := mungeSeal(line)
	if err != nil {
		return err
	}
	args := []string{"--nodes", fmt.Sprint(len(hosts)), "--ntasks", fmt.Sprint(len(hosts)), "--ntasks-per-node", "1",
		"--nodelist", strings.Join(hosts, ","), "--overlap", "--no-kill", "--kill-on-bad-exit=0", "--input", "all",
		"--mpi", "none", "--quiet", "--job-name", "ftrun-agents", agentPath, "agent", "--boot", "--munge"}
	return d.run("srun on "+strings.Join(hosts, ","), hosts, srun, args, sealed)
}

func (d *dialBack) run(what string, hosts []string, name string, args []string, line string) error {
	s := &starter{what: what, hosts: hosts, done: make(chan struct{})}
	s.cmd = exec.Command(name, args...)
	s.cmd.Stdout = &s.errs
	s.cmd.Stderr = &s.errs
	s.cmd.SysProcAttr = sysProcAttr()
	// Wait returns this long after the process ended even if something it
	// started still holds its output open.
	s.cmd.WaitDelay = 2 * time.Second
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return err
	}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	// The pipe holds the line; the agent reads it when it starts.
	go io.WriteString(s.stdin, line)
	d.mu.Lock()
	d.starters = append(d.starters, s)
	d.mu.Unlock()
	return nil
}

// await waits for an agent of every host in want (by hello name for srun
// hosts, by label for ssh), until timeout or until a starter whose hosts
// are still missing exits. It returns the links by host.
func (d *dialBack) await(want map[string]string, timeout time.Duration) (map[string]*agentLink, error) {
	got := make(map[string]*agentLink)
	fail := func(err error) (map[string]*agentLink, error) {
		for _, l := range got {
			l.conn.Close()
		}
		return nil, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(got) < len(want) {
		select {
		case l := <-d.links:
			host := l.label
			if l.label == labelSrun {
				host = l.addr
			}
			if how, ok := want[host]; !ok || got[host] != nil || (how == startSrun) != (l.label == labelSrun) {
				d.out.reportf("an agent on %q dialled back unasked; refused", host)
				l.conn.Close()
				continue
			}
			l.addr = host
			got[host] = l
		case <-tick.C:
			d.mu.Lock()
			starters := slices.Clone(d.starters)
			d.mu.Unlock()
			for _, s := range starters {
				select {
				case <-s.done:
				default:
					continue
				}
				for _, h := range s.hosts {
					if got[h] == nil {
						return fail(fmt.Errorf("cannot start the agent on %s: %s exited (%v) before it connected%s", h, s.what, s.err, said(s.errs.String())))
					}
				}
			}
		case <-timer.C:
			var missing []string
			for h := range want {
				if got[h] == nil {
					missing = append(missing, h)
				}
			}
			slices.Sort(missing)
			var why []string
			d.mu.Lock()
			for _, s := range d.starters {
				if t := s.errs.String(); t != "" {
					why = append(why, s.what+" said: "+t)
				}
			}
			d.mu.Unlock()
			return fail(fmt.Errorf("the agents on %s did not connect within %v%s", strings.Join(missing, ", "), timeout, said(strings.Join(why, "; "))))
		}
	}
	return got, nil
}

func said(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// stop ends the starters: their standard input closes (the agents end when
// their links have), and after grace they are killed.
func (d *dialBack) stop(grace time.Duration) {
	d.ln.Close()
	d.mu.Lock()
	starters := slices.Clone(d.starters)
	d.mu.Unlock()
	for _, s := range starters {
		s.stdin.Close()
	}
	// One deadline for all: once it has passed, every starter still
	// running is killed (a host cut off keeps its ssh or srun from ever
	// seeing the end of the session).
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	expired := false
	for _, s := range starters {
		if !expired {
			select {
			case <-s.done:
				continue
			case <-deadline.C:
				expired = true
			}
		}
		killGroup(s.cmd)
		<-s.done
	}
}

// mungeSeal seals line with munge for this user, as a boot line.
func mungeSeal(line string) (string, error) {
	cred, err := mungeCredential(line)
	if err != nil {
		return "", err
	}
	return bootMungeMagic + " " + cred + "\n", nil
}

// mungeCredential seals payload with munge for this user (five minutes).
func mungeCredential(payload string) (string, error) {
	path, err := exec.LookPath("munge")
	if err != nil {
		return "", errors.New("starting agents through Slurm needs munge (the agents' key crosses the network in the step's input, which Slurm does not encrypt): munge not found")
	}
	cmd := exec.Command(path, "--restrict-uid", fmt.Sprint(os.Getuid()), "--ttl", "300")
	cmd.Stdin = strings.NewReader(payload)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("munge: %v%s", err, said(strings.TrimSpace(errb.String())))
	}
	return strings.TrimSpace(out.String()), nil
}

// mungeOpen opens a credential of mungeCredential, and refuses one that a
// user other than this process's sealed: munge lets anyone seal a
// credential for this user (munge -u), so only the sealer's uid says it is
// the job owner's. It returns the payload and the address of the host
// where the credential was sealed (ENCODE_HOST, from that host's munged).
func mungeOpen(cred string) (payload, origin string, err error) {
	path, err := exec.LookPath("unmunge")
	if err != nil {
		return "", "", errors.New("the credential is sealed with munge, and unmunge is not found")
	}
	meta, err := os.CreateTemp("", "ftrun-unmunge-*")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(meta.Name())
	meta.Close()
	cmd := exec.Command(path, "--metadata", meta.Name(), "--numeric", "--keys", "UID,ENCODE_HOST")
	cmd.Stdin = strings.NewReader(cred)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("unmunge: %v%s", err, said(strings.TrimSpace(errb.String())))
	}
	m, err := os.ReadFile(meta.Name())
	if err != nil {
		return "", "", err
	}
	uid, ok := mungeUID(string(m))
	if !ok {
		return "", "", fmt.Errorf("unmunge gave no sealer's UID (%q)", jobwire.Printable(m))
	}
	if uid != os.Getuid() {
		return "", "", fmt.Errorf("refused a credential sealed by uid %d: this process runs as uid %d, and trusts only its own user's", uid, os.Getuid())
	}
	return out.String(), mungeField(string(m), "ENCODE_HOST"), nil
}

// mungeUID reads the sealer's uid from unmunge's numeric metadata
// ("UID:   1000").
func mungeUID(meta string) (int, bool) {
	uid, err := strconv.Atoi(mungeField(meta, "UID"))
	if err != nil || uid < 0 {
		return 0, false
	}
	return uid, true
}

// mungeField reads one field of unmunge's metadata ("KEY:   value").
func mungeField(meta, key string) string {
	for _, line := range strings.Split(meta, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runBootAgent is "ftrun agent --boot": read the boot line, dial ftrun back,
// serve the job, exit. With sealed (--munge: started through Slurm, whose
// step input crosses the network unencrypted) only a line sealed with
// munge by this user is obeyed.
func runBootAgent(stdin io.Reader, sealed bool, logf func(string, ...any)) int {
	lines := make(chan string, 1)
	rd := bufio.NewReaderSize(stdin, maxBootLine)
	go func() {
		s, _ := rd.ReadString('\n')
		lines <- s
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(agentTimeout):
		logf("no boot line on standard input within %v (ftrun agent --boot is started by ftrun itself)", agentTimeout)
		return ExitUsage
	}
	var origin string // where the boot line was sealed, if it was
	if rest, ok := strings.CutPrefix(line, bootMungeMagic+" "); ok {
		var err error
		if line, origin, err = mungeOpen(rest); err != nil {
			logf("boot line: %v", err)
			return ExitLaunch
		}
	} else if sealed {
		logf("refused a boot line not sealed with munge: an agent started through Slurm (--munge) obeys only its own user's sealed line")
		return ExitLaunch
	}
	b, err := parseBootLine(line)
	if err != nil {
		logf("%v", err)
		return ExitUsage
	}
	c, err := dialFirst(preferredAddrs(b.addrs), agentTimeout)
	if err != nil {
		logf("cannot reach ftrun: %v", err)
		return ExitLaunch
	}
	deadline := time.Now().Add(agentTimeout)
	c.SetDeadline(deadline)
	if err := jobwire.WriteFrame(c, msgLinkLabel, []byte(b.label)); err != nil {
		logf("cannot reach ftrun: %v", err)
		return ExitLaunch
	}
	tc, err := seclink.Client(c, b.key, deadline)
	if err != nil {
		c.Close()
		logf("ftrun at %s: %v", c.RemoteAddr(), err)
		return ExitLaunch
	}
	tc.SetDeadline(deadline)
	if err := jobwire.WriteFrame(tc, msgAgentHello, []byte(agentHostName())); err != nil {
		logf("ftrun at %s: %v", c.RemoteAddr(), err)
		return ExitLaunch
	}
	if b.label == labelSrun {
		if err := proveHosts(tc, b.job, origin); err != nil {
			tc.Close()
			logf("ftrun at %s: %v", c.RemoteAddr(), err)
			return ExitLaunch
		}
	}
	// Standard input closing means ssh or srun ended: ftrun is gone. The
	// link ends then, as when it breaks (under --arbiter the ranks go on
	// while this host's node acts: agentJob.outlive).
	go func() {
		io.Copy(io.Discard, rd)
		tc.Close()
	}()
	// SIGINT or SIGTERM kill the ranks and remove the routes of --cut
	// before the agent exits. SIGHUP (the end of the ssh session that
	// started it) ends the link as a lost link does. A write to standard
	// error once ssh is gone fails (EPIPE) instead of killing the agent.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	served := make(chan struct{})
	defer close(served)
	kill := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-sigc:
				if sig == syscall.SIGHUP {
					logf("got %v: the link to ftrun ends", sig)
					tc.Close()
					continue
				}
				logf("got %v: killing the ranks and exiting", sig)
				close(kill)
				tc.Close()
				return
			case <-served:
				return
			}
		}
	}()
	runAgentJob(tc, os.Environ(), logf, kill)
	return ExitOK
}

// preferredAddrs puts first the address the environment says ftrun came
// from: ssh's client (SSH_CONNECTION) or srun's host (SLURM_SRUN_COMM_HOST).
func preferredAddrs(addrs []string) []string {
	var hint []string
	if f := strings.Fields(os.Getenv("SSH_CONNECTION")); len(f) > 0 {
		hint = append(hint, f[0])
	}
	if h := os.Getenv("SLURM_SRUN_COMM_HOST"); h != "" {
		hint = append(hint, h)
	}
	out := slices.Clone(addrs)
	slices.SortStableFunc(out, func(a, b string) int {
		ha, _, _ := net.SplitHostPort(a)
		hb, _, _ := net.SplitHostPort(b)
		return boolInt(!slices.Contains(hint, ha)) - boolInt(!slices.Contains(hint, hb))
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// dialFirst dials every address at once and keeps the first connection.
func dialFirst(addrs []string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, len(addrs))
	for i, a := range addrs {
		go func() {
			// The preferred addresses get a head start.
			select {
			case <-time.After(time.Duration(i) * 50 * time.Millisecond):
			case <-ctx.Done():
			}
			var dl net.Dialer
			c, err := dl.DialContext(ctx, "tcp", a)
			ch <- res{c, err}
		}()
	}
	var errs []error
	var won net.Conn
	for range addrs {
		r := <-ch
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case won == nil:
			won = r.c
			cancel()
		default:
			r.c.Close()
		}
	}
	if won != nil {
		return won, nil
	}
	return nil, errors.Join(errs...)
}

// killGroup kills the process group of a started command.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
