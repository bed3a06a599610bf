// Package startup makes a process a rank of an ftrun job: it reads the
// environment ftrun gave the rank, meets the other ranks through the
// launcher's rendezvous, chooses and connects the rank's transport, and hands
// back a Session. Init (MPI_Init) then builds the world communicator on it,
// handing comm a ready world (comm.NewWorld with the Session as the
// Launcher): start-up sits above comm, which links no transport of its own.
// Programs call Init; few call Join themselves.
//
// It is the rank side only: ftrun's side (starting ranks, the rendezvous
// server, agents, placement) is package launcher, which ranks do not link,
// and the wire contract between the two is internal/jobwire.
//
// A rank's duties, in order:
//
//  1. Check InJob if the program may also run outside ftrun.
//  2. Call Join with a context that bounds start-up and the receiver of the
//     transport's control messages. Join reads the environment ftrun set
//     (FTRMA_RANK, FTRMA_SIZE, FTRMA_RENDEZVOUS, FTRMA_SECRET, FTRMA_JOB,
//     FTRMA_LOCAL_SIZE, FTRMA_TRANSPORT, FTRMA_HOST_ADDR, ...) and removes
//     FTRMA_SECRET from the process environment; builds the transport ftrun
//     chose (TCP, shared memory, shared memory to the ranks on this host and
//     TCP or verbs to the others: each peer through the first transport,
//     in priority order, that says it reaches the peer, multi.AskRoute) and
//     installs the receiver; connects
//     to the rendezvous, proves it knows its host's secret and checks that the
//     launcher knows it too; publishes the transport's address; waits for
//     every rank's address; and connects the transport to every peer.
//  3. Use Session.Transport for the job's communication.
//  4. Close the transport, then the Session. The Session holds the rendezvous
//     connection for the rank's lifetime: it is the rank's supervision channel.
//
// Example:
//
//	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
//	defer cancel()
//	s, err := startup.Join(ctx, recv)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer s.Close()
//	t := s.Transport()
//	defer t.Close()
//	err = t.Send((s.Rank()+1)%ftrma.Rank(s.Size()), []byte("hello"))
//
// Spare ranks (ftrun --respawn): Size counts them, Spares says how many,
// and the last Spares world ranks start absent. Session.Spawn asks ftrun to
// start some; OnAdmit hears of every spare that joins (after the transport
// is told, if it implements Admit(ftrma.Rank, string) error). A spare
// started later reads its request's payload with Spawned, and the ranks
// that had failed when it joined with FailedAtJoin; its transport gets an
// empty address for every rank not live then. Join builds the transport to
// match: at launch the spares are absent (tcp, shm and verbs
// Config.Absent); a spare started later is late (tcp and verbs
// Config.Late), counts the spares after it absent (ftrun starts them in
// rank order), and reports the ranks of FailedAtJoin down before it
// connects. Spares work over every transport: tcp, shm, verbs and
// shm+tcp. Over shm+tcp (see joinHybrid) every host's shm serves the
// spares too, a spare publishes its host with its TCP address
// (multi.AdmitAddr), and the live ranks reach it through shm when it
// starts on their host, else through TCP.
//
// A process not started by ftrun (InJob is false) can still run as a job of
// one rank: Singleton gives it a transport whose only peer is itself
// (startup.Init does this, MPI's singleton init).
//
// DetectorSettings gives the failure detector's period and timeout for this
// rank, from ftrun's flags and the host's CPUs.
package startup
