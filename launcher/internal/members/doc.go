// Package members is the host-membership layer of a job: the launcher
// (ftrun) and its per-host agents form one group per job, and when the group
// declares a host dead, ftrun fails every rank on that host at once.
//
// It wraps github.com/hashicorp/memberlist: SWIM failure detection (random
// round-robin probes, indirect probes through other members, a TCP
// fallback), gossip of suspect/dead/alive notices, and the Lifeguard
// refinements (a suspicion timeout that shrinks with independent
// confirmations, and a prober that stretches its own probe interval when it
// finds itself slow). The package adds what a job needs on top:
//
//   - All gossip is sealed with one 32-byte key (AES-256-GCM, memberlist's
//     keyring with incoming and outgoing verification on), so only holders
//     of the job's key are admitted; DeriveKey draws the key from the job
//     secret. One key for the group, not one per pair of members: SWIM
//     passes on every member's claims about every other, so a member
//     broken into can spread any claim whatever keys the others hold. A
//     caller must therefore never act on a verdict alone (ftrun checks
//     its own link to the host first).
//   - LAN timing (DefaultTiming) that detects a vanished host in about 1 s
//     (up to 32 members: under 2 s) instead of memberlist's 5-6 s, with
//     the bound stated as a formula (Timing.Detection).
//   - Failure (OnDead) and graceful departure (OnLeave) are reported
//     separately. memberlist reports both as NotifyLeave, and the node
//     state it passes there does not tell them apart (memberlist issue
//     #293), so Leave first marks the member's gossiped metadata.
//   - Callbacks run on one goroutine of the Group, in order, outside
//     memberlist's locks, so they may block briefly and call Members.
//   - memberlist's log goes to Config.Logger (default ftrma.Logger()), its
//     DEBUG noise at debug level; never straight to stderr.
//
// A caller (ftrun or an agent) uses it like this:
//
//  1. Derive the key from the job secret with DeriveKey and a fixed label;
//     every member of the job must use the same secret and label.
//  2. Start a member with a unique Name, the host's IP as BindAddr (port 0
//     picks one), the key, optional Meta (such as the host's ranks) and the
//     callbacks. Start contacts no one.
//  3. Publish Addr to the others by the job's own channel (ftrun hands its
//     address to the agents), and Join the addresses known; a JoinError
//     names the ones that did not answer.
//  4. Act on the callbacks: OnDead is final for the job (fence the host,
//     fail its ranks), even if the host later comes back and OnJoin reports
//     it again; OnLeave is an orderly exit.
//  5. At the end of the job, Leave so the others see OnLeave; Shutdown is
//     for the paths where announcing is pointless or impossible. Never
//     call either from a callback.
//
// The canonical use, in ftrun:
//
//	key := members.DeriveKey(jobSecret, "ftrma members v1")
//	g, err := members.Start(members.Config{
//		Name:     "ftrun",
//		BindAddr: ip,
//		Key:      key,
//		OnDead: func(host string, meta []byte) {
//			events <- hostDead{host, meta} // the job loop fails the host's ranks
//		},
//		Logger: logger,
//	})
//	if err != nil {
//		return err
//	}
//	defer g.Leave(time.Second)
//	// hand g.Addr() to the agents; each Starts its own member and Joins it
//
// Errors: Start, Join and Leave wrap ftrma.ErrInvalid for bad arguments;
// Join and Leave wrap ftrma.ErrClosed once the member has left or shut down
// (Shutdown itself is idempotent); Join returns a *JoinError naming the
// addresses it could not reach, including those of members holding another
// key.
//
// Failure model and limits. A member is declared dead when it does not
// answer probes (UDP, indirect UDP, TCP) and does not refute the suspicion
// within the suspicion timeout, so a crash, a cut network and a process
// stalled for longer than about ProbeInterval + S(n) all look alike; a
// shorter stall is survived (see DefaultTiming). The group is only as
// connected as its members' UDP and TCP paths: a member that can reach some
// but not others gets suspected by those others, and with Lifeguard's
// confirmations the majority view usually wins, but memberlist does not
// promise a single agreed view. Members learn of each other only through
// Join and gossip: there is no discovery.
package members
