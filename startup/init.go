package startup

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm"
	"github.com/ftrma/ftrma/transport"
)

// Init makes this process a rank of the job ftrun started it in and
// returns the world communicator (MPI_Init), with JobConfig's
// configuration.
//
// A process not started by ftrun (no job environment: InJob is false) gets
// a singleton world of size 1, as MPI allows: it is rank 0, its
// collectives, Agree and Shrink return at once, and windows on it work on
// its own memory (Singleton). A job environment that is there but broken
// is an error.
//
// In a spare started by a Replace (ftrun --respawn), Init returns the
// communicator that Replace made, once every member has agreed on it
// (Comm.Replaces says which rank this one took over), or an error wrapping
// comm.ErrReplace if the Replace was called off or failed (the spare is
// then a live rank in no communicator, with nothing to do). A spare started
// otherwise gets a communicator of itself alone.
func Init(ctx context.Context) (*comm.Comm, error) {
	return InitConfig(ctx, JobConfig())
}

// JobConfig is the configuration Init uses: comm's defaults, with the
// failure detector's period and timeout as ftrun set them for this rank
// (DetectorSettings). Programs that change a field start from it.
func JobConfig() comm.Config {
	cfg := comm.Config{}
	cfg.Detector.Period, cfg.Detector.Timeout = DetectorSettings()
	return cfg
}

// InitConfig is Init with an explicit configuration: Join, then
// comm.NewWorld on the Session (the job's spares, a late spare's start).
func InitConfig(ctx context.Context, cfg comm.Config) (*comm.Comm, error) {
	if !InJob() {
		return initSingleton(cfg)
	}
	early := &earlyReceiver{}
	spare := InSpare()
	s, err := Join(ctx, early)
	if err != nil {
		if spare && errors.Is(err, transport.ErrFenced) {
			// The survivors called the Replace off (a member failed
			// during it) and fenced this spare before it connected.
			return nil, fmt.Errorf("%w: the replace was called off: the ranks this spare was to join fenced it out: %w", comm.ErrReplace, err)
		}
		return nil, err
	}
	cfg.Spares = s.Spares()
	start := comm.Start{Transport: s.Transport(), Receive: early.set, Launcher: s}
	if payload, ok := s.Spawned(); ok {
		start.Spare = &comm.SpareStart{Payload: payload, Live: s.LiveAtJoin(), Failed: s.FailedAtJoin()}
	}
	c, err := comm.NewWorld(ctx, start, cfg)
	if err != nil && !errors.Is(err, comm.ErrReplace) {
		// The runtime did not start: the transport and the Session are
		// still this function's.
		s.Transport().Close()
		s.Close()
	}
	return c, err
}

// initSingleton builds the world of a process not started by ftrun: one
// rank, on Singleton's transport, without a launcher to confirm failures
// (there is no other rank to fail).
func initSingleton(cfg comm.Config) (*comm.Comm, error) {
	early := &earlyReceiver{}
	t, err := Singleton(early)
	if err != nil {
		return nil, err
	}
	c, err := comm.NewWorld(context.Background(), comm.Start{Transport: t, Receive: early.set}, cfg)
	if err != nil {
		t.Close()
	}
	return c, err
}

// earlyReceiver is the receiver Join installs before the transport
// connects: it keeps what arrives until the runtime takes over (set, which
// comm.NewWorld calls as Start.Receive), then passes everything on.
type earlyReceiver struct {
	mu    sync.Mutex
	recv  transport.Receiver
	early []earlyEvent
}

// earlyEvent is a message (msg set) or a peer-down event that came before
// the runtime.
type earlyEvent struct {
	from ftrma.Rank
	msg  []byte
	err  error
}

func (e *earlyReceiver) set(r transport.Receiver) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.recv = r
	for _, ev := range e.early {
		if ev.msg == nil {
			r.HandlePeerDown(ev.from, ev.err)
		} else {
			r.HandleMessage(ev.from, ev.msg)
		}
	}
	e.early = nil
}

func (e *earlyReceiver) HandleMessage(from ftrma.Rank, msg []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.recv != nil {
		e.recv.HandleMessage(from, msg)
		return
	}
	e.early = append(e.early, earlyEvent{from: from, msg: append([]byte{}, msg...)})
}

func (e *earlyReceiver) HandlePeerDown(peer ftrma.Rank, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.recv != nil {
		e.recv.HandlePeerDown(peer, err)
		return
	}
	e.early = append(e.early, earlyEvent{from: peer, err: err})
}
