// Package launcher starts ftrma jobs and connects their ranks.
//
// It has two sides that meet over a small rendezvous protocol on loopback TCP.
//
// The job side (Start, Job, Main; used by cmd/ftrun) starts N local ranks of a
// program as child processes, runs the rendezvous server, hands every job a
// fresh random secret, forwards the ranks' output line by line, injects
// failures (--kill), forwards SIGINT/SIGTERM, and turns the ranks' exits into
// one exit status. It does not kill the job when a rank dies (ULFM's rule).
//
// The rank side (Join, Session) runs inside each rank. A rank's duties, in
// order:
//
//  1. Check InJob if the program may also run outside ftrun.
//  2. Call Join with a context that bounds start-up and the receiver of the
//     transport's control messages. Join reads the environment ftrun set
//     (FTRMA_RANK, FTRMA_SIZE, FTRMA_RENDEZVOUS, FTRMA_SECRET, FTRMA_JOB,
//     FTRMA_LOCAL_SIZE) and removes FTRMA_SECRET from the process environment;
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
// The job side is Unix-only (process groups, signals); Pdeathsig, which makes a
// rank die with its launcher, is Linux-only.
package launcher
