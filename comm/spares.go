package comm

import (
	"context"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/comm/internal/admission"
	"github.com/ftrma/ftrma/transport"
)

// The runtime's handling of spares, for comm/commtest (see package
// admission). ftrun's start-up drives the same calls (InitConfig): admit
// on every admission notice, a spare runtime and joinReplace in a spare's
// Init, the Session as the Spawner.
func init() {
	admission.Admit = func(c any, s ftrma.Rank) error { return c.(*Comm).rt.admit(s) }
	admission.Settle = func(c any) { c.(*Comm).rt.settle() }
	admission.NewSpare = func(t transport.Transport, cfg any, live, failed []ftrma.Rank) (any, error) {
		return newSpare(t, cfg.(Config), live, failed)
	}
	admission.AdmitPayload = func(c any, s ftrma.Rank, payload []byte) error {
		return c.(*Comm).rt.admitWith(s, payload, true)
	}
	admission.SetSpawner = func(c any, spawn func(ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error)) {
		rt := c.(*Comm).rt
		rt.mu.Lock()
		rt.spawner = spawnFunc(spawn)
		rt.mu.Unlock()
	}
	admission.JoinReplace = func(ctx context.Context, c any, payload []byte) (any, bool, error) {
		self := c.(*Comm)
		plan, ok := parseReplace(payload, self.rt.n)
		if !ok {
			return nil, false, nil
		}
		nc, err := joinReplace(ctx, self, plan)
		if err != nil {
			return nil, true, err
		}
		return nc, true, nil
	}
	admission.Gone = func(c any, r ftrma.Rank) bool {
		rt := c.(*Comm).rt
		if r < 0 || int(r) >= rt.n {
			return false
		}
		return rt.isGone(r)
	}
}

// spawnFunc is a function as a Spawner.
type spawnFunc func(ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error)

func (f spawnFunc) Spawn(ctx context.Context, k int, payload []byte) ([]ftrma.Rank, error) {
	return f(ctx, k, payload)
}
