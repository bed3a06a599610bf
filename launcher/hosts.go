package launcher

import (
	"cmp"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"

	"github.com/ftrma/ftrma"
)

// Where the ranks go, in order of precedence:
//
//  1. --hosts: running agents ("ftrun agent --listen"), in contiguous
//     blocks (assignRanks);
//  2. --hostfile or -H: those hosts and slots; ftrun starts an agent on
//     every host other than this one that gets ranks: by srun when ftrun
//     runs inside a Slurm allocation, else by ssh;
//  3. inside a Slurm allocation (SLURM_JOB_ID and its node list set; not
//     with --no-slurm): the allocation's nodes, with SLURM_TASKS_PER_NODE
//     slots each, agents started by srun;
//  4. else every rank on this host, which has one slot per CPU.
//
// With 2 and 3, -n defaults to the number of slots, and --map-by slot
// (default) or node places the ranks, as Open MPI's mpirun does. With 2, 3
// and 4 a job of more ranks than slots is refused unless --oversubscribe
// (mpirun's rule): ftrun would otherwise start whatever -n says, 100,000
// processes in under 3 s.

// inSlurm reports whether ftrun runs inside a Slurm allocation.
func inSlurm(getenv func(string) string) bool {
	return getenv("SLURM_JOB_ID") != "" && (getenv("SLURM_JOB_NODELIST") != "" || getenv("SLURM_NODELIST") != "")
}

// planHosts resolves where o's ranks go, setting o.N when the hosts give it,
// and the hosts for spares only (Config.SpareHosts; with --respawn, the
// hosts of a hostfile or allocation that get no rank, as many as the
// spares need).
func planHosts(o *Config) ([]hostBlock, error) {
	var spares []hostBlock
	if o.SpareHosts != "" {
		var err error
		if len(o.Hosts) > 0 {
			spares, err = spareAgents(o.SpareHosts)
		} else {
			start := startSSH
			if !o.NoSlurm && inSlurm(os.Getenv) {
				start = startSrun
			}
			spares, err = spareHostList(o.SpareHosts, start)
		}
		if err != nil {
			return nil, fmt.Errorf("--spare-hosts: %w", err)
		}
	}
	spareSlots := 0
	for _, b := range spares {
		spareSlots += b.capacity()
	}
	blocks, err := planRankHosts(o, spareSlots)
	if err != nil {
		return nil, err
	}
	blocks = append(blocks, spares...)
	// One block per host: a host named twice (by name and address) is an
	// error rather than two agents.
	seen := map[string]bool{}
	for _, b := range blocks {
		if seen[b.label()] {
			return nil, fmt.Errorf("host %s is named twice: %w", b.label(), ftrma.ErrInvalid)
		}
		seen[b.label()] = true
	}
	return blocks, nil
}

// spareAgents parses --spare-hosts in --hosts' format: running agents,
// HOST[:PORT[:N]], N their slots (default 1).
func spareAgents(s string) ([]hostBlock, error) {
	hosts, err := ParseHosts(s)
	if err != nil {
		return nil, err
	}
	var blocks []hostBlock
	for _, h := range hosts {
		if h.Addr == "" {
			return nil, fmt.Errorf("%s: this host is no spare host (its slots come from -n and --oversubscribe): %w", LocalHost, ftrma.ErrInvalid)
		}
		blocks = append(blocks, hostBlock{addr: h.Addr, name: h.Addr, slots: max(h.N, 1), spare: true})
	}
	return blocks, nil
}

// spareHostList parses --spare-hosts in -H's format: hosts whose agents
// ftrun starts (start: startSSH or startSrun), with their slots.
func spareHostList(s string, start string) ([]hostBlock, error) {
	hosts, err := ParseHostList(s)
	if err != nil {
		return nil, err
	}
	var blocks []hostBlock
	for _, h := range hosts {
		if isThisHost(h.Name) {
			return nil, fmt.Errorf("%s is this host, no spare host (give it slots in the hostfile or -H instead): %w", h.Name, ftrma.ErrInvalid)
		}
		blocks = append(blocks, hostBlock{name: h.Name, start: start, slots: h.Slots, spare: true})
	}
	return blocks, nil
}

// planRankHosts resolves where o's ranks go (planHosts without
// --spare-hosts, whose hosts have spareSlots slots).
func planRankHosts(o *Config, spareSlots int) ([]hostBlock, error) {
	if len(o.Hosts) > 0 {
		return assignRanks(o.Hosts, o.N)
	}
	slurm := !o.NoSlurm && inSlurm(os.Getenv)
	var hosts []HostSlots
	var err error
	switch {
	case o.Hostfile != "":
		f, ferr := os.Open(o.Hostfile)
		if ferr != nil {
			return nil, fmt.Errorf("--hostfile: %w", ferr)
		}
		hosts, err = ParseHostfile(f, o.Hostfile)
		f.Close()
	case o.HostList != "":
		hosts, err = ParseHostList(o.HostList)
	case slurm:
		hosts, _, err = SlurmHosts(os.Getenv)
	default:
		if err := checkLocalSlots(o.N, localSlots(), o.Oversubscribe); err != nil {
			return nil, err
		}
		return []hostBlock{{ranks: rankRange(0, o.N)}}, nil
	}
	if err != nil {
		return nil, err
	}
	ranks, n, err := MapRanks(hosts, o.N, o.MapBy, o.Oversubscribe)
	if err != nil {
		return nil, err
	}
	o.N = n
	start := startSSH
	if slurm {
		start = startSrun
	}
	// With spares, hosts that get no rank hold them: as many as the
	// spares need beyond the free slots of the hosts with ranks and of
	// --spare-hosts.
	need := o.Spares
	if need < 0 {
		need = n // --respawn without a count: as many as ranks
	}
	need -= spareSlots
	for i, h := range hosts {
		if len(ranks[i]) > 0 {
			need -= max(0, h.Slots-len(ranks[i]))
		}
	}
	var blocks []hostBlock
	for i, h := range hosts {
		if len(ranks[i]) == 0 {
			if need <= 0 {
				continue
			}
			need -= h.Slots
		}
		b := hostBlock{name: h.Name, ranks: ranks[i], start: start, slots: h.Slots}
		if isThisHost(h.Name) {
			b.name, b.start = "", ""
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// localSlots is the slots of this host when no hostfile, host list or
// allocation gives them: one per CPU, as mpirun counts them (a variable for
// tests).
var localSlots = runtime.NumCPU

// checkLocalSlots refuses n ranks on this host's slots unless oversubscribe,
// in MapRanks' words; even with oversubscribe n may not pass the ranks
// MapRanks places.
func checkLocalSlots(n, slots int, oversubscribe bool) error {
	switch {
	case n > maxPlacedRanks:
		return fmt.Errorf("%d ranks, want 1 to %d: %w", n, maxPlacedRanks, ftrma.ErrInvalid)
	case n > slots && !oversubscribe:
		return fmt.Errorf("there are not enough slots available: %d ranks asked for, %s on this host (one per CPU); "+
			"use --oversubscribe to run more ranks than slots, or ask for fewer ranks: %w",
			n, plural(slots, "slot"), ftrma.ErrInvalid)
	}
	return nil
}

// isThisHost reports whether name is the host ftrun runs on.
func isThisHost(name string) bool {
	switch name {
	case "localhost", "127.0.0.1", "::1", "":
		return true
	}
	if h, err := os.Hostname(); err == nil {
		short, _, _ := strings.Cut(h, ".")
		if name == h || name == short {
			return true
		}
	}
	ip := net.ParseIP(name)
	if ip == nil {
		return false
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// connectAgents connects to the agent of every remote block: the running
// agents of --hosts, and the agents ftrun starts by ssh or srun, which dial
// back. On error every link made is closed and every agent started ends.
func (j *Job) connectAgents(blocks []hostBlock, root []byte) error {
	fail := func(err error) error {
		for _, l := range j.links {
			l.close()
		}
		j.links = nil
		if j.dial != nil {
			j.dial.stop(j.tm.timeout)
			j.dial = nil
		}
		return err
	}
	want := map[string]string{}
	var srun []string
	for _, b := range blocks {
		switch b.start {
		case startSSH:
			want[b.name] = startSSH
		case startSrun:
			want[b.name] = startSrun
			srun = append(srun, b.name)
		}
	}
	var started map[string]*agentLink
	if len(want) > 0 {
		agentPath := j.opts.LaunchAgent
		if agentPath == "" {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("--launch-agent not given, and this ftrun's path is unknown: %w", err)
			}
			agentPath = self
		}
		d, err := listenDialBack(root, j.id, j.out)
		if err != nil {
			return err
		}
		j.dial = d
		ssh := strings.Fields(cmp.Or(j.opts.SSH, os.Getenv(EnvSSH), "ssh"))
		for _, b := range blocks {
			if b.start == startSSH {
				if err := d.startSSH(ssh, b.name, agentPath); err != nil {
					return fail(fmt.Errorf("cannot start the agent on %s: %w", b.name, err))
				}
			}
		}
		if len(srun) > 0 {
			if err := d.startSrun("srun", srun, agentPath); err != nil {
				return fail(fmt.Errorf("cannot start the agents on %s: %w", strings.Join(srun, ","), err))
			}
		}
		if started, err = d.await(want, agentTimeout); err != nil {
			return fail(err)
		}
	}
	var agentSecret []byte
	for i, b := range blocks {
		var l *agentLink
		switch {
		case b.start != "":
			l = started[b.name]
		case b.addr != "":
			if agentSecret == nil {
				s, err := agentSecretFrom(j.opts.AgentSecret)
				if err != nil {
					return fail(err)
				}
				agentSecret = s
			}
			var err error
			if l, err = dialAgent(b.addr, agentSecret); err != nil {
				return fail(err)
			}
		default:
			continue
		}
		l.block, l.tm = b, j.tm
		j.links = append(j.links, l)
		blocks[i].link = l
	}
	if len(j.links) > 0 {
		j.startMembers(root)
	}
	return nil
}
