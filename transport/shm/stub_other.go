//go:build !linux

package shm

import (
	"context"
	"fmt"
	"runtime"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// Transport is the shared-memory transport; only Linux has it. Elsewhere
// Open fails and the type exists so that callers compile.
type Transport struct{}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Allocator = (*Transport)(nil)
)

var errUnsupported = fmt.Errorf("%w: shm transport: not supported on %s", ftrma.ErrInvalid, runtime.GOOS)

// Open fails with ftrma.ErrInvalid: the transport needs Linux.
func Open(cfg Config) (*Transport, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, errUnsupported
}

func (t *Transport) Connect(ctx context.Context) error          { return errUnsupported }
func (t *Transport) Rank() ftrma.Rank                           { return 0 }
func (t *Transport) Size() int                                  { return 0 }
func (t *Transport) Serves(r ftrma.Rank) bool                   { return false }
func (t *Transport) Caps() transport.Caps                       { return 0 }
func (t *Transport) Alloc(size int) ([]byte, error)             { return nil, errUnsupported }
func (t *Transport) Release(buf []byte) error                   { return errUnsupported }
func (t *Transport) Register(mem []byte) (transport.Key, error) { return 0, errUnsupported }
func (t *Transport) Deregister(key transport.Key) error         { return errUnsupported }
func (t *Transport) Push(peer ftrma.Rank)                       {}
func (t *Transport) SetReceiver(r transport.Receiver)           {}
func (t *Transport) Fence(peer ftrma.Rank) error                { return errUnsupported }
func (t *Transport) PeerDown(peer ftrma.Rank, err error)        {}
func (t *Transport) Close() error                               { return nil }
func (t *Transport) Send(peer ftrma.Rank, msg []byte) error     { return errUnsupported }
func (t *Transport) Wait(ctx context.Context, peer ftrma.Rank, seq transport.Seq) error {
	return errUnsupported
}
func (t *Transport) Flush(ctx context.Context, peer ftrma.Rank) error { return errUnsupported }
func (t *Transport) Test(peer ftrma.Rank, seq transport.Seq) (bool, error) {
	return true, errUnsupported
}
func (t *Transport) Write(peer ftrma.Rank, key transport.Key, off uint64, src []byte) (transport.Seq, error) {
	return 0, errUnsupported
}
func (t *Transport) Read(peer ftrma.Rank, key transport.Key, off uint64, dst []byte) (transport.Seq, error) {
	return 0, errUnsupported
}
func (t *Transport) CompareAndSwap64(peer ftrma.Rank, key transport.Key, off uint64, old, new uint64, result *uint64) (transport.Seq, error) {
	return 0, errUnsupported
}
func (t *Transport) FetchAndAdd64(peer ftrma.Rank, key transport.Key, off uint64, delta uint64, result *uint64) (transport.Seq, error) {
	return 0, errUnsupported
}

// ControlBytes is 0: there is no shared-memory transport here.
func ControlBytes(m int) uint64 { return 0 }

// MarkExited does nothing: there is no shared-memory transport here.
func MarkExited(dir, job string, r ftrma.Rank, wake []ftrma.Rank) error { return nil }

// PrepareDir fails: there is no shared-memory transport here.
func PrepareDir(dir string) error { return errUnsupported }

// OpenRanks fails: there is no shared-memory transport here.
func OpenRanks(dir, job string) ([]ftrma.Rank, error) { return nil, errUnsupported }
