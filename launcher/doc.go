// Package launcher is ftrun's side of an ftrma job: it starts the ranks,
// connects them through its rendezvous, supervises them, and runs the agents
// that start ranks on other hosts. The ranks' side is package startup (ranks
// do not link this package); the two meet over a small rendezvous protocol
// on TCP (loopback for a job on one host), whose wire format, environment
// variables and handshake are internal/jobwire.
//
// The job side (Start, Job, Main; used by cmd/ftrun) starts N ranks of a
// program as child processes, runs the rendezvous server, hands every job a
// fresh random secret, forwards the ranks' output line by line, injects
// failures (--kill; --pause, --kill-host and --cut, inject.go), forwards
// SIGINT/SIGTERM, and turns the ranks' exits into one exit status. It does
// not kill the job when a rank dies (ULFM's rule).
//
// A job can span hosts. On every other host an agent starts that host's
// ranks: "ftrun agent --boot", which ftrun starts itself by ssh or srun
// for the hosts of a hostfile, -H list or Slurm allocation (boot.go), or a
// long-running "ftrun agent --listen HOST[:PORT]" named by Config.Hosts
// (ftrun --hosts; port DefaultAgentPort by default). Every link runs mutual
// TLS 1.3 keyed from a secret (per-host keys derived from the job's root
// secret, or the running agents' secret); over it the launcher sends the
// program, its arguments and each rank's FTRMA_ variables (the agent's own
// environment is the base), and the agent starts the ranks in process
// groups of their own, forwards their output and exits, and carries out the
// launcher's signals (--kill, suspicions, SIGINT/SIGTERM) and injected
// failures (--pause's SIGCONT timer, --kill-host, --cut's routes). Both
// sides ping; a link that breaks or goes silent for linkTimeout makes the
// agent kill the job's ranks and the launcher count them as failed, and so
// does a host that the job's memberlist group declares dead
// (membership.go). The rendezvous then listens on this host's IP toward
// the first agent, every rank's transport listens on its host's IP
// (FTRMA_HOST_ADDR), and shared memory reaches only the ranks on the same
// host (shm+tcp). The agent protocol is in agentwire.go.
//
// Placement decides where the ranks go: a hostfile or host list with slots
// (Config.Hostfile, HostList; ParseHostfile, ParseHostList) or a Slurm
// allocation (SlurmHosts), filled by slot or by node (MapRanks); ftrun then
// starts an agent on each host that gets ranks, by ssh or srun. Without
// them this host has one slot per CPU. More ranks than slots is refused
// unless Config.Oversubscribe (--oversubscribe), as mpirun does.
//
// Timing comes from package failure, the one home of the detector's
// settings: the ranks' lease and the agent links stretch with the detector
// timeout asked for and with failure.RanksPerCPU of ftrun's host.
//
// Spares (--respawn=S, Config.Spares; spawn.go): the job has N+S world
// ranks, of which the last S start absent. A rank asks for spares on its
// supervision channel (startup.Session.Spawn, SpawnNear with the rank each
// spare replaces); ftrun starts them one at a time, waits until each has
// joined the rendezvous, tells every live rank (an admission), and answers.
// A spare starts on the replaced rank's host if that host is alive with a
// free slot, else on a host of --spare-hosts (Config.SpareHosts) or one
// with slots beyond -n, else on ftrun's own host (spareplace.go); on a
// remote host its agent starts it (agentwire.go: spawn) and supervises it
// as its other ranks. The protocol is in internal/jobwire/spawn.go.
//
// Output files (--output-filename DIR, Config.OutputFilename;
// outfiles.go): each rank's output also goes to DIR/1/rank.N/stdout and
// stderr, Open MPI's layout, written on the rank's host (by ftrun for its
// own ranks, by the agent for the others, each line before it is
// forwarded); every host makes DIR/1 before any rank starts (agentwire.go:
// outfiles), and at the end ftrun writes the job's report to DIR/report
// (report.go: WriteReport, from a plain JobReport).
//
// The replicated arbiter (the default over several hosts; --no-arbiter,
// Config.NoArbiter, turns it off; arbiterjob.go): ftrun (node 1) and its
// agents (node h+1 on the job's host h) run the job's authority
// (launcher/internal/arbiter): a mesh of mutual-TLS links, one per pair of nodes
// keyed by a pair key derived from the job's root secret (arbiterlink.go),
// a driver per node that runs it on real time (arbiterrun.go), the hosts'
// rank exits and the ranks' suspicions as its inputs; its host leases bound
// the ranks' leases (supervisor.go), and its verdicts and exits reach the
// ranks through every host's supervisor, so the job goes on without ftrun
// (launcher/internal/arbiter/WIRING.md). Its decisions are logged (leaders, host and
// rank verdicts; with --output-filename also to DIR/1/arbiter.N on each
// host). At the end ftrun logs one summary line beside its own verdicts.
// The set-up rides the agent links before the launch (arbiterwire.go).
//
// Shared memory left by a killed ftrun or agent: each makes the job's
// private directory in /dev/shm and records itself there in a locked owner
// file before its ranks start, and every ftrun sweeps the
// stale jobs of its user when it starts (--cleanup: on demand, printing what
// it removed); see shmsweep.go for when a job counts as stale.
//
// The job side and the agent are Unix-only (process groups, signals);
// Pdeathsig, which makes a rank die with its launcher or agent, is Linux-only.
package launcher
