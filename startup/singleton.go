package startup

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"

	"github.com/ftrma/ftrma/transport"
	"github.com/ftrma/ftrma/transport/tcp"
)

// Singleton returns the transport of a job of one rank, for a process not
// started by ftrun (InJob is false): MPI's singleton init. It is a TCP
// transport of size 1 whose only peer is this rank itself, served through
// its loopback path: operations on its own registered memory run inline,
// and nothing goes over the network. Its listener, on 127.0.0.1, refuses
// every connection: the job secret is random and known to nobody else.
// recv is installed as its receiver. The caller closes the transport.
func Singleton(recv transport.Receiver) (transport.Transport, error) {
	secret := make([]byte, 32)
	rand.Read(secret) // never fails (crypto/rand)
	t, err := tcp.Listen(tcp.Config{Rank: 0, Size: 1, Secret: secret, ListenAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("startup: singleton: %w", err)
	}
	t.SetReceiver(recv)
	// No peer to wait for: Connect returns at once.
	if err := t.Connect(context.Background(), []string{""}); err != nil {
		t.Close()
		return nil, fmt.Errorf("startup: singleton: %w", err)
	}
	return t, nil
}
