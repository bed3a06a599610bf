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
// failures (--kill), forwards SIGINT/SIGTERM, and turns the ranks' exits into
// one exit status. It does not kill the job when a rank dies (ULFM's rule).
//
// A job can span hosts (Options.Hosts, ftrun --hosts): the ranks are split in
// contiguous blocks over the hosts, and on every remote host an agent (Agent,
// RunAgent; "ftrun agent --listen HOST[:PORT]", a long-running daemon, port
// DefaultAgentPort by default) starts that host's block. The launcher and
// the agent prove a shared agent secret (FTRMA_AGENT_SECRET) to each other
// with the same HMAC challenge/response as the rendezvous; then the launcher
// sends the program, its arguments and each rank's FTRMA_ variables (the
// agent's own environment is the base), and the agent starts the ranks in
// process groups of their own, forwards their output and exits, and carries
// out the launcher's signals (--kill, suspicions, SIGINT/SIGTERM). If the
// connection breaks, the agent kills that job's ranks and the launcher counts
// them as failed. The rendezvous then listens on this host's IP toward the
// first agent, every rank's transport listens on its host's IP
// (FTRMA_HOST_ADDR), and shared memory reaches only the ranks on the same
// host. The agent protocol is in agentwire.go.
//
// Placement decides where the ranks go: a hostfile or host list with slots
// (Options.Hostfile, HostList; ParseHostfile, ParseHostList) or a Slurm
// allocation (SlurmHosts), filled by slot or by node (MapRanks); ftrun then
// starts an agent on each host that gets ranks, by ssh or srun.
//
// The job side and the agent are Unix-only (process groups, signals);
// Pdeathsig, which makes a rank die with its launcher or agent, is Linux-only.
package launcher
