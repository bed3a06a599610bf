// Package launcher starts ftrma jobs and connects their ranks.
//
// It has two sides that meet over a small rendezvous protocol on TCP
// (loopback for a job on one host).
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
// (FTRMA_HOST_ADDR), and the transport is TCP: shared memory needs one host.
// The agent protocol is in agentwire.go.
//
// The rank side (Join, Session) runs inside each rank. A rank's duties, in
// order:
//
//  1. Check InJob if the program may also run outside ftrun.
//  2. Call Join with a context that bounds start-up and the receiver of the
//     transport's control messages. Join reads the environment ftrun set
//     (FTRMA_RANK, FTRMA_SIZE, FTRMA_RENDEZVOUS, FTRMA_SECRET, FTRMA_JOB,
//     FTRMA_LOCAL_SIZE, FTRMA_HOST_ADDR) and removes FTRMA_SECRET from the process environment;
//     builds the transport (TCP) and installs the receiver; connects to the
//     rendezvous, proves it knows the job secret and checks that the launcher
//     knows it too; publishes the transport's address; waits for every rank's
//     address; and connects the transport to every peer.
//  3. Use Session.Transport for the job's communication.
//  4. Close the transport, then the Session. The Session holds the rendezvous
//     connection for the rank's lifetime: it is the rank's supervision channel.
//
// Example:
//
//	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
//	defer cancel()
//	s, err := launcher.Join(ctx, recv)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer s.Close()
//	t := s.Transport()
//	defer t.Close()
//	err = t.Send((s.Rank()+1)%ftrma.Rank(s.Size()), []byte("hello"))
//
// The job side and the agent are Unix-only (process groups, signals);
// Pdeathsig, which makes a rank die with its launcher or agent, is Linux-only.
package launcher
