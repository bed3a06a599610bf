package tcp

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// hostKeys are the secrets of three hosts.
var hostKeys = [][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 32)}

// keyedCluster starts connected transports with host keys, rank r on
// host hostOf[r], sealed as seal says.
func keyedCluster(t *testing.T, hostOf []int, seal SealMode) ([]*Transport, *logSink) {
	t.Helper()
	return clusterConfig(t, len(hostOf), func(cfg *Config) {
		cfg.Secret, cfg.HostKey, cfg.Spin, cfg.Seal = nil, hostKeys[hostOf[cfg.Rank]], -1, seal
	})
}

// With host keys, ranks on different hosts and on one host connect, plain
// and sealed, and their data moves; each address carries its host's key,
// the same for the ranks of one host.
func TestHostKeysConnect(t *testing.T) {
	for _, seal := range []SealMode{SealRemote, SealAll} {
		ts, _ := keyedCluster(t, []int{0, 0, 1}, seal)
		_, k0, _ := splitHostKey(ts[0].Addr())
		_, k1, _ := splitHostKey(ts[1].Addr())
		_, k2, _ := splitHostKey(ts[2].Addr())
		if k0 == nil || !bytes.Equal(k0, k1) || bytes.Equal(k0, k2) {
			t.Fatalf("host keys in the addresses: %x %x %x", k0, k1, k2)
		}
		ctx := testCtx(t)
		mem := words(64)
		key, err := ts[2].Register(mem)
		if err != nil {
			t.Fatal(err)
		}
		for _, from := range []int{0, 1} {
			src := bytes.Repeat([]byte{byte(10 + from)}, 64)
			if _, err := ts[from].Write(2, key, 0, src); err != nil {
				t.Fatal(err)
			}
			if err := ts[from].Flush(ctx, 2); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mem[:64], src) {
				t.Fatalf("seal %v: rank %d's write did not land", seal, from)
			}
		}
	}
}

// A host that holds its own key but not another host's cannot pose as a
// rank of that host: sending its own public key in the name of rank 1
// (whose address carries host 0's key) is refused before any proof, and
// sending host 0's public key it cannot prove. A hello proving the job
// secret is refused by ranks with host keys. Each refusal is logged.
func TestHostKeyImpostorRefused(t *testing.T) {
	ts, logs := keyedCluster(t, []int{0, 0, 1}, SealRemote)
	intruder, err := newHostIdentity(hostKeys[2]) // host 2: the one broken into
	if err != nil {
		t.Fatal(err)
	}
	_, host0, _ := splitHostKey(ts[0].Addr())
	try := func(secret, pub []byte) error {
		conn, err := net.Dial("tcp", ts[0].peers[0].netAddr(ts[0].Addr()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Rank 1 is connected already: claim rank 2 (on host 1) instead.
		_, err = dialHandshake(conn, secret, pub, 2, 0, false)
		return err
	}
	ownPair, _ := intruder.pairKey(host0)
	if err := try(ownPair, intruder.pub); err == nil {
		t.Error("a connection claiming rank 2 with host 2's key was accepted")
	}
	if err := try(ownPair, host0); err == nil {
		t.Error("a connection claiming rank 2 with host 0's public key, unproven, was accepted")
	}
	if err := try(secret, nil); err == nil {
		t.Error("a connection proving a job secret was accepted by a rank with host keys")
	}
	// One line a second per source: the first refusal is in the log.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "another host's key") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "claiming rank 2 with another host's key") {
		t.Errorf("the refusal is not logged:\n%s", logs.String())
	}
	for _, c := range []struct {
		pub  []byte
		want string
	}{{intruder.pub, "another host's key"}, {nil, "without a host key"}} {
		if _, err := ts[0].secretFor(2, c.pub); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("secretFor(2, %x): %v, want an error saying %q", c.pub, err, c.want)
		}
	}
	if _, err := intruder.pairKey(host0[:31]); err == nil {
		t.Error("a host key of 31 bytes was used")
	}
	// The real rank 2 still works.
	if err := ts[2].Flush(testCtx(t), 0); err != nil {
		t.Fatal(err)
	}
}

// A rank with host keys refuses peer addresses without one, and Admit of a
// spare whose address has none.
func TestHostKeyAddressRequired(t *testing.T) {
	tr, err := Listen(Config{Rank: 0, Size: 3, HostKey: hostKeys[0], Absent: []ftrma.Rank{2}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := tr.Connect(ctx, []string{tr.Addr(), "127.0.0.1:1", ""}); err == nil || !strings.Contains(err.Error(), "carries no host key") {
		t.Errorf("Connect with a peer address without a host key: %v", err)
	}
	if err := tr.Admit(2, "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "carries no host key") {
		t.Errorf("Admit with an address without a host key: %v", err)
	}
	if _, _, err := splitHostKey("127.0.0.1:1#abcd"); err == nil {
		t.Error("a short host key was accepted")
	}
}

// A rank may dial before its peer has the launcher's list (the peer does
// not know yet which host key the dialer's address carries): the peer's
// side waits for its Connect, within the handshake's bound, and the
// connection is made then.
func TestHostKeyDialBeforeTheBook(t *testing.T) {
	ts := make([]*Transport, 2)
	addrs := make([]string, 2)
	logs := &logSink{}
	for r := range ts {
		tr, err := Listen(Config{Rank: ftrma.Rank(r), Size: 2, HostKey: hostKeys[r], Spin: -1, Logger: logs.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		ts[r], addrs[r] = tr, tr.Addr()
	}
	ctx := testCtx(t)
	dialed := make(chan error, 1)
	go func() { dialed <- ts[0].Connect(ctx, addrs) }() // rank 0 dials rank 1 (each rank dials those above it)
	// Rank 1 has no list yet: the handshake waits in secretFor.
	for !ts[1].peers[0].waitingForKey.Load() {
		select {
		case err := <-dialed:
			t.Fatalf("rank 0's Connect ended before rank 1 knew its key: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	if err := ts[1].Connect(ctx, addrs); err != nil {
		t.Fatal(err)
	}
	if err := <-dialed; err != nil {
		t.Fatalf("rank 0's Connect: %v\n%s", err, logs.String())
	}
	if err := ts[0].Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
}
