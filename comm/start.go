package comm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Start is what a rank's start-up hands NewWorld: the rank's connected
// transport and, in a job, the launcher that started it. Package startup
// builds it from the environment ftrun gives a rank (startup.Init); tests
// build it over memnet or shared memory (New, comm/commtest).
type Start struct {
	// Transport is connected to every peer that has started.
	Transport transport.Transport
	// Receive installs the runtime as the transport's receiver, handing it
	// first what the transport delivered before (start-up receives from
	// the moment the transport connects). Nil: Transport.SetReceiver.
	Receive func(transport.Receiver)
	// Launcher is the launcher that started the job, or nil (a test, a
	// process run alone): without one the failure detector decides
	// failures alone, there is no lease, and Replace has no spares to
	// start. With one, every failure waits for its confirmation.
	Launcher Launcher
	// Spare is set in a spare started after the job began (a Replace's,
	// ftrun --respawn); nil in a rank started with the job.
	Spare *SpareStart
}

// SpareStart is what a spare started after the job began knows of the job
// when it joins.
type SpareStart struct {
	// Payload is the payload of the request that started it: a Replace's
	// plan, which NewWorld carries out.
	Payload []byte
	// Live and Failed are the ranks live and failed when it joined.
	Live, Failed []ftrma.Rank
}

// Launcher is what the runtime asks of the launcher that started the job:
// ftrun, through startup.Session.
type Launcher interface {
	// Spawner starts spares for Replace.
	Spawner
	// SpawnNear is Spawn with a placement hint: spare i replaces world rank
	// near[i], and starts on that rank's host if it can.
	SpawnNear(ctx context.Context, k int, payload []byte, near []ftrma.Rank) ([]ftrma.Rank, error)
	// Suspect reports that this rank's detector suspects r. The launcher
	// confirms it: r is killed should it still run, and its exit reported
	// to every rank (a peer-down error wrapping transport.ErrExitReported).
	Suspect(r ftrma.Rank) error
	// LeaseTerm is the term of this rank's lease. While the lease is being
	// rescued (it ran out, one more ask is out) Rescuing returns a channel
	// closed when the rescue ends; otherwise nil.
	LeaseTerm() time.Duration
	Rescuing() <-chan struct{}
	// HostVerdictBound is the longest the launcher's host layer takes to
	// decide on a host fallen silent, or 0.
	HostVerdictBound() time.Duration
	// OnLeaseLost sets what runs when the lease is lost (Config.OnLostPrimary).
	OnLeaseLost(f func())
	// OnAdmit sets what runs when a spare joins the job, once the transport
	// has admitted it.
	OnAdmit(f func(r ftrma.Rank, addr string, payload []byte))
	// Leave tells the launcher that this rank leaves in order (it is not
	// reported failed); Close ends this rank's link to it.
	Leave() error
	Close() error
}

// NewWorld builds the world communicator of a rank on what its start-up
// made: the runtime over s.Transport, installed as its receiver, with the
// launcher's confirmation of failures, lease and spares when s.Launcher is
// set. A rank started with the job gets the ranks that start with it
// (cfg.Spares of the job's last ranks are spares, absent until admitted).
// A spare started later gets a communicator of itself alone, or, when its
// payload is a Replace's plan, the communicator that Replace made once
// every member has agreed on it (an error wrapping ErrReplace if the
// Replace was called off or failed). On an error before the runtime
// started, the transport and launcher are the caller's to close.
func NewWorld(ctx context.Context, s Start, cfg Config) (*Comm, error) {
	if s.Launcher != nil {
		cfg.Detector.AwaitConfirmation = true
	}
	var rt *runtime
	var err error
	if s.Spare != nil {
		rt, err = newSpareRuntime(s.Transport, cfg, s.Spare.Live, s.Spare.Failed)
	} else {
		rt, err = newRuntime(s.Transport, cfg)
	}
	if err != nil {
		return nil, err
	}
	var c *Comm
	if s.Spare != nil {
		c = newWorldOf(rt, []ftrma.Rank{rt.self})
	} else {
		c = newWorld(rt)
	}
	if l := s.Launcher; l != nil {
		rt.suspect, rt.lease, rt.spawner = l, l, l
		l.OnLeaseLost(rt.cfg.OnLostPrimary)
		c.session = l
	}
	if s.Receive != nil {
		s.Receive(rt)
	} else {
		s.Transport.SetReceiver(rt)
	}
	if l := s.Launcher; l != nil {
		// The transport has admitted the spare when this runs (startup),
		// on the goroutine reading ftrun's channel: hand it to the run
		// goroutine.
		l.OnAdmit(func(r ftrma.Rank, _ string, payload []byte) { rt.admitWith(r, payload, false) })
	}
	rt.start()
	if s.Spare == nil {
		return c, nil
	}
	plan, ok := parseReplace(s.Spare.Payload, rt.n)
	if !ok {
		return c, nil
	}
	nc, err := joinReplace(ctx, c, plan)
	if err != nil {
		c.Close()
		if !errors.Is(err, ErrReplace) {
			// Its last agreement failed: so did the Replace, at every
			// member.
			err = fmt.Errorf("%w: %w", ErrReplace, err)
		}
		return nil, err
	}
	return nc, nil
}
