//go:build !(linux && cgo && verbs)

package verbs

import (
	"context"
	"errors"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Built reports whether this binary carries the verbs transport.
const Built = false

var errNotBuilt = errors.New("verbs: this binary was built without the verbs transport (build it with CGO_ENABLED=1 -tags verbs, libibverbs-dev installed)")

// Transport is the verbs transport; in this build Open always fails.
type Transport struct{ transport.Transport }

// Load fails: the transport is not built in.
func Load() error { return errNotBuilt }

// Open fails: the transport is not built in.
func Open(cfg Config) (*Transport, error) { return nil, errNotBuilt }

// Addr is empty in this build.
func (t *Transport) Addr() string { return "" }

// Connect fails in this build.
func (t *Transport) Connect(ctx context.Context, addrs []string) error { return errNotBuilt }

// Admit fails in this build.
func (t *Transport) Admit(peer ftrma.Rank, addr string) error { return errNotBuilt }

// PeerDown does nothing in this build.
func (t *Transport) PeerDown(peer ftrma.Rank, cause error) {}

// Device is empty in this build.
func (t *Transport) Device() Choice { return Choice{} }
