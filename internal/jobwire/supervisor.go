package jobwire

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ftrma/ftrma/internal/seclink"
)

// The host supervisor's channel (ftrun --arbiter). On an agent's host the
// ranks take their lease from their agent, not from ftrun: the agent
// listens on the host's loopback (EnvSupervisor), each rank dials it once
// it has joined and proves its host's secret with SupervisorKey (TLS,
// internal/seclink), then sends MsgLeaseAsk (LeasePayload) every fifth of
// its term as it does to ftrun. The agent answers with MsgLeaseGrant
// carrying GrantPayload: the ask's seq and the term the rank may count
// from when it sent the ask, never more than its usual term, nor than what
// remains of the host's lease from the job's arbiter. The agent answers
// only while its host's arbiter node acts. So a rank's lease ends no later
// than its host's, and the rank's arithmetic is the same as with ftrun.
//
// The agent also sends MsgExit (RankPayload) on the channel for every rank
// the job's arbiter says is gone: a RankFailed verdict (its host's
// included) or a RankExited with a status other than 0, as soon as its
// node applies it, and on a new channel for every rank gone before. The
// rank treats it as ftrun's exit notice (the two may both come: a notice
// is idempotent). So a rank learns of failures once ftrun is gone.
//
// Suspicions and probes, for when ftrun is gone. The rank's first frame
// after the handshake is MsgHello with RankPayload(its rank), which names
// the channel. A rank whose channel to ftrun broke sends its detector's
// suspicions here (MsgSuspect, RankPayload of the suspect) instead of to
// ftrun; the agent hands them to the arbiter. The agent asks a rank
// whether it runs with MsgProbe (empty); the rank answers MsgProbeReply
// (empty) at once. An agent that gets no answer within half a term (as ftrun's own probe)
// kills the rank and waits until it has reaped it before it tells the
// arbiter the rank does not answer: a rank is never declared while it
// may act.
//
// Spares, for when ftrun is gone (launcher/internal/arbiter/WIRING.md). A rank whose
// channel to ftrun broke sends its spawn request here (MsgSpawn,
// SpawnRequest); the agent answers MsgSpawned (SpawnAnswer) after the
// admissions of the spares it names. The agent sends MsgAdmit (Admission)
// for every spare an agent started, as its join applies in the arbiter's
// log (a rank ignores an admission of a spare it already has). A spare an
// agent starts joins at that agent's rendezvous (EnvRendezvous on the
// loopback; the protocol of ftrun's, for whole addresses only), whose
// connection then stays its channel as ftrun's would.

// SupervisorKey is the TLS key of the channel between a rank and its
// host's agent, from the host's secret; distinct from RendezvousKey.
func SupervisorKey(secret []byte) []byte { return seclink.DeriveKey(secret, "ftrma host supervisor") }

// GrantPayload encodes a supervisor's grant: the ask's seq and the term.
func GrantPayload(seq uint64, term time.Duration) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, seq), uint64(term))
}

// ParseGrant decodes GrantPayload; the term is positive.
func ParseGrant(p []byte) (seq uint64, term time.Duration, err error) {
	if len(p) != 16 {
		return 0, 0, fmt.Errorf("%w: grant of %d bytes", ErrMalformed, len(p))
	}
	t := binary.BigEndian.Uint64(p[8:])
	if t == 0 || t > 1<<62 {
		return 0, 0, fmt.Errorf("%w: grant of term %d ns", ErrMalformed, t)
	}
	return binary.BigEndian.Uint64(p), time.Duration(t), nil
}
