package launcher

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/internal/jobwire"
)

// An address over a limit of the wire is refused with an error that names
// the limit, the size and the rank, which the rank reads (not a connection
// reset) and ftrun logs; the rank can then join with a good address. The
// rank here skips startup's own check (startup tests it), except in the
// last case, which gives up as startup's rank does.
func TestRendezvousAddressOverLimit(t *testing.T) {
	const n = 2
	s, logs := startServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	big := 8 << 20 // far more than the socket buffers hold
	tests := []struct {
		name  string
		talk  func(c net.Conn) error // after the handshake, as rank 1
		limit string
		size  int
	}{
		{"address over MaxAddr", func(c net.Conn) error {
			return jobwire.WriteFrame(c, jobwire.MsgPublish, jobwire.WholeAddr(strings.Repeat("a", jobwire.MaxAddr+1)).Append(nil))
		}, "jobwire.MaxAddr", jobwire.MaxAddr + 1},
		{"part over MaxAddrPart", func(c net.Conn) error {
			w := jobwire.MaxAddrPart + 1
			return jobwire.WriteFrame(c, jobwire.MsgPublish, jobwire.Addr{Common: "c", Width: w, Parts: strings.Repeat("p", n*w)}.Append(nil))
		}, "jobwire.MaxAddrPart", jobwire.MaxAddrPart + 1},
		{"publish frame over MaxPublish", func(c net.Conn) error {
			return jobwire.WriteFrame(c, jobwire.MsgPublish, make([]byte, big))
		}, fmt.Sprintf("jobwire.MaxPublish(%d)", n), 1 + big},
		{"rank gives up", func(c net.Conn) error {
			err := jobwire.WholeAddr(strings.Repeat("a", jobwire.MaxAddr+5)).Check(1, n)
			return jobwire.WriteFrame(c, jobwire.MsgError, jobwire.ErrorText(err.Error()))
		}, "jobwire.MaxAddr", jobwire.MaxAddr + 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(logs.String())
			c := dialRank(t, s, 1)
			defer c.Close()
			if err := tt.talk(c); err != nil {
				t.Fatalf("the rank's publish: %v", err)
			}
			var rankSays string
			if tt.name == "rank gives up" {
				rankSays = "(it told)"
			} else {
				typ, p, err := jobwire.ReadFrame(c, jobwire.MaxSmallFrame)
				if err != nil {
					t.Fatalf("the rank reads %v, not the launcher's answer", err)
				}
				err = jobwire.ExpectFrom(typ, p, jobwire.MsgAddrs, "addresses", "launcher")
				if err == nil {
					t.Fatal("the launcher took the address")
				}
				rankSays = err.Error()
				for _, want := range []string{"launcher says: rank 1:", tt.limit, fmt.Sprintf(" %d bytes", tt.size)} {
					if !strings.Contains(rankSays, want) {
						t.Errorf("the rank hears %q, which does not say %q", rankSays, want)
					}
				}
			}
			var log string
			if !waitFor(func() bool { log = strings.TrimSpace(logs.String()[before:]); return strings.Contains(log, tt.limit) }) {
				t.Fatalf("ftrun's log %q does not name %s", log, tt.limit)
			}
			for _, want := range []string{"rank 1", tt.limit, fmt.Sprintf(" %d bytes", tt.size)} {
				if !strings.Contains(log, want) {
					t.Errorf("ftrun logs %q, which does not say %q", log, want)
				}
			}
			t.Logf("rank: %s\nftrun: %s", rankSays, log)
		})
	}

	// Rank 1 was not taken: both ranks join.
	res := joinAll(ctx, []testRank{fakeRank(s, 0, n), fakeRank(s, 1, n)})
	defer closeAll(res)
	for i, r := range res {
		if r.err != nil || !reflect.DeepEqual(r.addrs, wantAddrs(n)) {
			t.Fatalf("rank %d got %q, %v", i, r.addrs, r.err)
		}
	}
}

// dialRank connects to s as rank r and runs the handshake.
func dialRank(t *testing.T, s *rvServer, r ftrma.Rank) net.Conn {
	t.Helper()
	raw, err := net.Dial("tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := jobwire.DialRendezvous(raw, hostSecret0, 0, time.Now().Add(testTimeout))
	if err != nil {
		raw.Close()
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(testTimeout))
	if err := jobwire.ClientHandshake(c, hostSecret0, jobwire.RendezvousHandshake, uint32(r)); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// An address list over jobwire.MaxAddrsFrame (here lowered) fails the
// rendezvous with an error that every rank gets and ftrun logs, naming the
// limit, the size and the rank whose address is the largest.
func TestRendezvousListOverLimit(t *testing.T) {
	const n = 3
	logs := new(logRecorder)
	s, err := listenRendezvous(rvConfig{Size: n, Secret: testSecret(1), Logger: logs.logger(), HandshakeTimeout: testTimeout, maxAddrsFrame: 100, logEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res := make([]joinResult, n)
	done := make(chan int)
	for r := range n {
		go func() {
			c, a, err := fakeRank(s, ftrma.Rank(r), n).join(ctx, strings.Repeat("a", 20+10*r))
			res[r] = joinResult{c, a, err}
			done <- r
		}()
	}
	for range n {
		<-done
	}
	defer closeAll(res)
	// 4 + 3 × (2 + 1) + 20 + 30 + 40 = 103 bytes of payload.
	const want = "address list of 3 ranks of 104 bytes is over the rendezvous limit jobwire.MaxAddrsFrame = 100 bytes (the largest address is rank 2's"
	for r, j := range res {
		if j.err == nil || !strings.Contains(j.err.Error(), "launcher says: "+want) {
			t.Errorf("rank %d: %v, want %q", r, j.err, want)
		}
	}
	if !strings.Contains(logs.String(), want) {
		t.Errorf("ftrun's log %q does not say %q", logs, want)
	}
}
