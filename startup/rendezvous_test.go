package startup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
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
	return testLauncher(t, func(_ int32, c net.Conn) bool {
		defer c.Close()
		if tc, ok := acceptHandshake(c); ok {
			talk(tc)
		}
		return true
	})
}

// testLauncher accepts connections one at a time and hands each to serve
// (n counts them from 1) until serve says it is done; it returns its
// address. It stops when the test ends.
func testLauncher(t *testing.T, serve func(n int32, c net.Conn) (done bool)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for n := int32(1); ; n++ {
			c, err := ln.Accept()
			if err != nil || serve(n, c) {
				return
			}
		}
	}()
	return ln.Addr().String()
}

// acceptHandshake is the launcher's side of a rendezvous connection's
// handshake; the connection it returns has the test's deadline.
func acceptHandshake(c net.Conn) (net.Conn, bool) {
	tc, _, _, err := jobwire.AcceptRendezvous(c, func(int) ([]byte, error) { return testSecret(1), nil }, time.Now().Add(testTimeout))
	if err != nil {
		return nil, false
	}
	tc.SetDeadline(time.Now().Add(testTimeout))
	return tc, true
}

// acceptRank is the launcher's side of a rank's handshake and publish (of a
// job of 2 ranks); it returns the rank's published address, or "" if the
// rank did not get that far.
func acceptRank(c net.Conn) string {
	id, err := jobwire.ServerHandshake(c, testSecret(1), jobwire.RendezvousHandshake, nil)
	if err != nil {
		return ""
	}
	typ, p, err := jobwire.ReadFrame(c, jobwire.MaxPublish(2))
	if err != nil || typ != jobwire.MsgPublish {
		return ""
	}
	a, err := jobwire.ParsePublish(p, int(id), 2)
	if err != nil {
		return ""
	}
	return a.Common
}

// whole is the addrs payload of whole addresses.
func whole(addrs ...string) []byte {
	as := make([]jobwire.Addr, len(addrs))
	for q, a := range addrs {
		as[q] = jobwire.WholeAddr(a)
	}
	return jobwire.AppendAddrs(nil, as, 0)
}

// A rank publishes its address and gets every rank's; the connection stays
// open as its supervision channel.
func TestRendezvous(t *testing.T) {
	published := make(chan string, 1)
	addr := fakeLauncher(t, func(c net.Conn) {
		a := acceptRank(c)
		published <- a
		jobwire.WriteFrame(c, jobwire.MsgAddrs, whole("addr-0", a))
		jobwire.WriteFrame(c, jobwire.MsgExit, jobwire.RankPayload(0))
		jobwire.ReadFrame(c, jobwire.MaxSmallFrame) // until the rank hangs up
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	env := jobEnv{rank: 1, size: 2, rendezvous: addr, secret: testSecret(1)}
	c, addrs, err := rendezvous(ctx, env, jobwire.WholeAddr("addr-1"))
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
	_, _, err := rendezvous(ctx, jobEnv{rank: 0, size: 2, rendezvous: addr, secret: testSecret(1)}, jobwire.WholeAddr("a"))
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
			jobwire.WriteFrame(c, jobwire.MsgHello, jobwire.Hello{Version: jobwire.RendezvousVersion + 1}.Append(nil))
			jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
		}, fmt.Sprintf("version %d", jobwire.RendezvousVersion+1)},
		{"not a launcher", func(c net.Conn) {
			c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
		}, "malformed"},
		{"wrong address count", func(c net.Conn) {
			jobwire.WriteFrame(c, jobwire.MsgHello, jobwire.Hello{Version: v, Nonce: nonce}.Append(nil))
			_, p, _ := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
			a, _ := jobwire.ParseAuth(p)
			jobwire.WriteFrame(c, jobwire.MsgProof, jobwire.Proof(testSecret(1), jobwire.LabelLauncher, v, a.Rank, nonce, a.Nonce))
			jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
			jobwire.WriteFrame(c, jobwire.MsgAddrs, whole("addr-0"))
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
			c, _, err := rendezvous(ctx, env, jobwire.WholeAddr("addr-0"))
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

// A rank whose address is over a limit of the wire does not publish it: its
// error names the limit, the size and the rank, and it tells the launcher
// the same, so that ftrun can say why the rank gave up. A list from the
// launcher over its limit is named likewise (and not read).
func TestRankAddressOverLimit(t *testing.T) {
	w := jobwire.MaxAddrPart + 1
	tests := []struct {
		name  string
		addr  jobwire.Addr
		list  bool // the launcher takes the address and sends a list too long
		limit string
		size  int
	}{
		{"address", jobwire.WholeAddr(strings.Repeat("a", jobwire.MaxAddr+1)), false, "jobwire.MaxAddr", jobwire.MaxAddr + 1},
		{"common part", jobwire.Addr{Common: strings.Repeat("a", jobwire.MaxAddr+2), Width: 1, Parts: "xy"}, false, "jobwire.MaxAddr", jobwire.MaxAddr + 2},
		{"per-rank part", jobwire.Addr{Common: "a", Width: w, Parts: strings.Repeat("p", 2*w)}, false, "jobwire.MaxAddrPart", w},
		{"address list", jobwire.WholeAddr("addr-1"), true, "jobwire.MaxAddrsFrame", jobwire.MaxAddrsFrame + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			told := make(chan string, 1)
			addr := fakeLauncher(t, func(c net.Conn) {
				if tt.list {
					acceptRank(c)
					c.Write(jobwire.AppendFrameHeader(nil, jobwire.MsgAddrs, jobwire.MaxAddrsFrame))
					jobwire.ReadFrame(c, jobwire.MaxSmallFrame) // until the rank hangs up
					return
				}
				if _, err := jobwire.ServerHandshake(c, testSecret(1), jobwire.RendezvousHandshake, nil); err != nil {
					told <- err.Error()
					return
				}
				typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
				switch {
				case err != nil:
					told <- err.Error()
				case typ != jobwire.MsgError:
					told <- fmt.Sprintf("a message of type %d", typ)
				default:
					told <- jobwire.Printable(p)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			c, _, err := rendezvous(ctx, jobEnv{rank: 1, size: 2, rendezvous: addr, secret: testSecret(1)}, tt.addr)
			if err == nil {
				c.Close()
				t.Fatal("rendezvous succeeded")
			}
			le, ok := errors.AsType[*jobwire.LimitError](err)
			if !ok || le.Rank != 1 || le.Size != tt.size || "jobwire."+le.Limit != tt.limit {
				t.Fatalf("error %v, want a LimitError of rank 1, %d bytes, %s", err, tt.size, tt.limit)
			}
			for _, want := range []string{"rank 1", tt.limit, fmt.Sprintf(" %d bytes", tt.size)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if !tt.list {
				if got := <-told; got != le.Error() {
					t.Errorf("the launcher was told %q, want %q", got, le.Error())
				}
			}
			t.Logf("%v", err)
		})
	}
}

// cuttingLauncher closes the first cut connections after their host frame,
// as a launcher whose handshake gate is full cuts a handshake off, and
// serves the next one as a job of 2 ranks. It returns its address and the
// number of connections it accepted.
func cuttingLauncher(t *testing.T, cut int32, published chan<- string) (string, *atomic.Int32) {
	t.Helper()
	accepted := new(atomic.Int32)
	addr := testLauncher(t, func(n int32, c net.Conn) bool {
		defer c.Close()
		accepted.Store(n)
		if n <= cut {
			c.SetDeadline(time.Now().Add(testTimeout))
			jobwire.ReadFrame(c, jobwire.MaxSmallFrame) // the host frame
			return false
		}
		tc, ok := acceptHandshake(c)
		if !ok {
			return true
		}
		a := acceptRank(tc)
		published <- a
		jobwire.WriteFrame(tc, jobwire.MsgAddrs, whole("addr-0", a))
		jobwire.ReadFrame(tc, jobwire.MaxSmallFrame) // until the rank hangs up
		return true
	})
	return addr, accepted
}

// A rank whose handshake the launcher cuts off dials again, a bounded
// number of times (jobwire.HandshakeTries).
func TestRendezvousDialsAgainWhenCutOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	published := make(chan string, 1)
	addr, _ := cuttingLauncher(t, 2, published)
	c, addrs, err := rendezvous(ctx, jobEnv{rank: 1, size: 2, rendezvous: addr, secret: testSecret(1)}, jobwire.WholeAddr("addr-1"))
	if err != nil {
		t.Fatalf("after two handshakes cut off: %v", err)
	}
	c.Close()
	if got := <-published; got != "addr-1" {
		t.Errorf("the launcher got %q, want addr-1", got)
	}
	if want := []string{"addr-0", "addr-1"}; !reflect.DeepEqual(addrs, want) {
		t.Errorf("addresses %q, want %q", addrs, want)
	}

	addr, accepted := cuttingLauncher(t, 1<<30, nil)
	_, _, err = rendezvous(ctx, jobEnv{rank: 1, size: 2, rendezvous: addr, secret: testSecret(1)}, jobwire.WholeAddr("addr-1"))
	if !errors.Is(err, errCutOff) {
		t.Fatalf("with every handshake cut off: %v, want one wrapping errCutOff", err)
	}
	if n := accepted.Load(); n != jobwire.HandshakeTries {
		t.Errorf("the rank dialed %d times, want %d", n, jobwire.HandshakeTries)
	}
}
