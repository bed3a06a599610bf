// Package admission hands comm/commtest the runtime's handling of spares,
// which comm keeps unexported: in a job, ftrun's start-up drives it (an
// admission notice for every spare that starts), and no application calls
// it. comm fills the variables in its init; only comm and comm/commtest
// can import this package.
package admission

import (
	"context"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Set by comm's init; c is a *comm.Comm, cfg a comm.Config.
var (
	// Admit admits world rank s at the runtime of communicator c, as an
	// admission notice does: the failure detector's ring and the broadcast
	// graph re-form to include it. It returns once that is done.
	Admit func(c any, s ftrma.Rank) error
	// Settle tells the runtime of c that every live rank has admitted
	// every spare admitted there.
	Settle func(c any)
	// NewSpare builds a spare started after the job began, over the
	// connected transport t: live and failed are the world ranks live and
	// failed at its admission, every other rank but itself is absent. It
	// returns the communicator of the spare alone that owns the runtime
	// (a *comm.Comm).
	NewSpare func(t transport.Transport, cfg any, live, failed []ftrma.Rank) (any, error)
	// AdmitPayload is Admit with the payload of the spawn that started s
	// (a Replace waiting for s learns of it so).
	AdmitPayload func(c any, s ftrma.Rank, payload []byte) error
	// SetSpawner sets what starts spares for Replace at the runtime of c.
	SetSpawner func(c any, spawn func(ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error))
	// JoinReplace is the spare's side of Replace for spare c (NewSpare's
	// communicator) started with payload: it returns the communicator
	// Replace made, as the spare's Init does, or ok false when payload is
	// not a Replace's.
	JoinReplace func(ctx context.Context, c any, payload []byte) (nc any, ok bool, err error)
	// Gone reports whether the runtime of c counts world rank r failed or
	// departed.
	Gone func(c any, r ftrma.Rank) bool
)
