package startup

import (
	"bytes"
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
	"github.com/ftrma/ftrma/internal/seclink"
)

// testTimeout bounds every wait in these tests; it is a safety net, never a
// measurement.
const testTimeout = 30 * time.Second

// testSecret is a job secret of the size ftrun makes.
func testSecret(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// fakeLauncher serves one connection with talk and returns its address.
// (The launcher's own rendezvous server is tested against ranks in package
// launcher.)
func fakeLauncher(t *testing.T, talk func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc, err := seclink.Server(c, jobwire.RendezvousKey(testSecret(1)), time.Now().Add(testTimeout))
		if err != nil {
			return
		}
		tc.SetDeadline(time.Now().Add(testTimeout))
		talk(tc)
	}()
	return ln.Addr().String()
}

// acceptRank is the launcher's side of a rank's handshake and publish; it
// returns the rank's published address, or "" if the rank did not get that
// far.
func acceptRank(c net.Conn) string {
	if _, err := jobwire.ServerHandshake(c, testSecret(1), jobwire.RendezvousHandshake, nil); err != nil {
		return ""
	}
	typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
	if err != nil || typ != jobwire.MsgPublish {
		return ""
	}
	return string(p)
}

// A rank publishes its address and gets every rank's; the connection stays
// open as its supervision channel.
func TestRendezvous(t *testing.T) {
	published := make(chan string, 1)
	addr := fakeLauncher(t, func(c net.Conn) {
		a := acceptRank(c)
		published <- a
		jobwire.WriteFrame(c, jobwire.MsgAddrs, jobwire.AppendAddrs(nil, []string{"addr-0", a}))
		jobwire.WriteFrame(c, jobwire.MsgExit, jobwire.RankPayload(0))
		jobwire.ReadFrame(c, jobwire.MaxSmallFrame) // until the rank hangs up
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	env := jobEnv{rank: 1, size: 2, rendezvous: addr, secret: testSecret(1)}
	c, addrs, err := rendezvous(ctx, env, "addr-1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := <-published; got != "addr-1" {
		t.Errorf("the launcher got %q, want addr-1", got)
	}
	if want := []string{"addr-0", "addr-1"}; !reflect.DeepEqual(addrs, want) {
		t.Errorf("addresses %q, want %q", addrs, want)
	}
	c.SetDeadline(time.Now().Add(testTimeout))
	if typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame); err != nil || typ != jobwire.MsgExit || !bytes.Equal(p, jobwire.RankPayload(0)) {
		t.Errorf("supervision channel: %d %v %v, want the exit notice of rank 0", typ, p, err)
	}
}

// Join gives up when its context ends.
func TestRendezvousContext(t *testing.T) {
	published := make(chan struct{})
	addr := fakeLauncher(t, func(c net.Conn) {
		acceptRank(c)
		close(published)
		jobwire.ReadFrame(c, jobwire.MaxSmallFrame) // no addresses: the other rank never comes
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-published
		cancel()
	}()
	_, _, err := rendezvous(ctx, jobEnv{rank: 0, size: 2, rendezvous: addr, secret: testSecret(1)}, "a")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("rendezvous after cancel: %v, want context.Canceled", err)
	}
}

// A rank checks that the launcher knows the secret too, and which protocol
// version it speaks, and passes on the launcher's refusals.
func TestRankChecksLauncher(t *testing.T) {
	nonce := bytes.Repeat([]byte{3}, jobwire.NonceSize)
	v := uint16(jobwire.RendezvousVersion)
	tests := []struct {
		name string
		talk func(c net.Conn)
		want string
	}{
		{"wrong secret", func(c net.Conn) {
			jobwire.WriteFrame(c, jobwire.MsgHello, jobwire.Hello{Version: v, Nonce: nonce}.Append(nil))
			_, p, _ := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
			a, _ := jobwire.ParseAuth(p)
			jobwire.WriteFrame(c, jobwire.MsgProof, jobwire.Proof(testSecret(9), jobwire.LabelLauncher, v, a.Rank, nonce, a.Nonce))
			jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
		}, "failed to prove"},
		{"rank's proof reflected", func(c net.Conn) {
			jobwire.WriteFrame(c, jobwire.MsgHello, jobwire.Hello{Version: v, Nonce: nonce}.Append(nil))
			_, p, _ := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
			a, _ := jobwire.ParseAuth(p)
			jobwire.WriteFrame(c, jobwire.MsgProof, a.Proof)
			jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
		}, "failed to prove"},
		{"newer version", func(c net.Conn) {
			jobwire.WriteFrame(c, jobwire.MsgHello, jobwire.Hello{Version: 2}.Append(nil))
			jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
		}, "version 2"},
		{"not a launcher", func(c net.Conn) {
			c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
		}, "malformed"},
		{"wrong address count", func(c net.Conn) {
			jobwire.WriteFrame(c, jobwire.MsgHello, jobwire.Hello{Version: v, Nonce: nonce}.Append(nil))
			_, p, _ := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
			a, _ := jobwire.ParseAuth(p)
			jobwire.WriteFrame(c, jobwire.MsgProof, jobwire.Proof(testSecret(1), jobwire.LabelLauncher, v, a.Rank, nonce, a.Nonce))
			jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
			jobwire.WriteFrame(c, jobwire.MsgAddrs, jobwire.AppendAddrs(nil, []string{"addr-0"}))
		}, "1 addresses for a job of 2"},
		{"rank refused", func(c net.Conn) {
			jobwire.ServerHandshake(c, testSecret(1), jobwire.RendezvousHandshake, func(id uint32) error {
				return errors.New("rank 0 already joined")
			})
		}, "launcher says: rank 0 already joined"},
		{"rendezvous failed", func(c net.Conn) {
			acceptRank(c)
			jobwire.WriteFrame(c, jobwire.MsgError, jobwire.ErrorText("rank 1 exited with status 7 before the rendezvous completed"))
		}, "launcher says: rank 1 exited with status 7 before the rendezvous completed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := jobEnv{rank: 0, size: 2, rendezvous: fakeLauncher(t, tt.talk), secret: testSecret(1)}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			c, _, err := rendezvous(ctx, env, "addr-0")
			if err == nil {
				c.Close()
				t.Fatal("rendezvous succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestJoinNilReceiver(t *testing.T) {
	env := jobEnv{rank: 0, size: 1, rendezvous: "127.0.0.1:1", secret: testSecret(1), job: "test", localSize: 1}
	if _, err := join(context.Background(), env, nil); err == nil {
		t.Fatal("join with a nil receiver succeeded")
	}
}

// peerDowns records the exit notices awaitStart hands on.
type peerDowns struct {
	mu    sync.Mutex
	ranks []ftrma.Rank
}

func (p *peerDowns) exited(r ftrma.Rank) {
	p.mu.Lock()
	p.ranks = append(p.ranks, r)
	p.mu.Unlock()
}

// The rank's side of the start barrier: it says it is connected, hands the
// exit notices that come before start to its transport (not its own), and
// returns on start; an error from the launcher or the end of ctx ends the
// wait. (The launcher's side is tested in package launcher.)
func TestAwaitStart(t *testing.T) {
	env := jobEnv{rank: 1, size: 3}
	tests := []struct {
		name   string
		talk   func(c net.Conn) // after reading connected
		cancel bool
		want   string // error, "" for none
		downs  []ftrma.Rank
	}{
		{"start", func(c net.Conn) {
			jobwire.WriteFrame(c, jobwire.MsgExit, jobwire.RankPayload(2))
			jobwire.WriteFrame(c, jobwire.MsgExit, jobwire.RankPayload(1))
			jobwire.WriteFrame(c, jobwire.MsgStart, nil)
		}, false, "", []ftrma.Rank{2}},
		{"error", func(c net.Conn) {
			jobwire.WriteFrame(c, jobwire.MsgError, []byte("no start for you"))
		}, false, "launcher says: no start for you", nil},
		{"cancelled", func(c net.Conn) {}, true, context.Canceled.Error(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rank, launcher := net.Pipe()
			defer rank.Close()
			defer launcher.Close()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			go func() {
				typ, _, err := jobwire.ReadFrame(launcher, jobwire.MaxSmallFrame)
				if err != nil || typ != jobwire.MsgConnected {
					t.Errorf("launcher read %d, %v; want connected", typ, err)
					return
				}
				tt.talk(launcher)
				if tt.cancel {
					cancel()
				}
			}()
			downs := new(peerDowns)
			err := awaitStart(ctx, rank, env, downs.exited)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("awaitStart: %v, want %q", err, tt.want)
			}
			downs.mu.Lock()
			defer downs.mu.Unlock()
			if !reflect.DeepEqual(downs.ranks, tt.downs) {
				t.Errorf("exit notices handed on: %v, want %v", downs.ranks, tt.downs)
			}
		})
	}
}
