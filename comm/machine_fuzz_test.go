package comm

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/agree"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/revoke"
)

// FuzzMachineStep: the runtime hands every control message a peer sends to
// its machine. Whatever the bytes and whoever claims to send them, step
// never panics, and what the machine sends in turn is well formed: its
// broadcasts parse.
//
// The input is a run of messages, each: a byte naming the sender (in range
// or not), a length byte, then that many bytes (kind byte first).
func FuzzMachineStep(f *testing.F) {
	msg := func(from byte, m []byte) []byte { return append([]byte{from, byte(len(m))}, m...) }
	bcast := func(id string) []byte {
		return revoke.Message{ID: id, Payload: []byte("why")}.AppendBinary([]byte{kindBcast})
	}
	agreeMsg := func(ctx uint32, m agree.Message) []byte {
		return m.AppendBinary(binary.BigEndian.AppendUint32([]byte{kindAgree}, ctx))
	}
	f.Add(msg(1, []byte{kindHeartbeat}))
	f.Add(append(msg(2, bcast("fail/3")), msg(1, bcast("revoke/7/1"))...))
	f.Add(msg(3, bcast("fail/0"))) // this rank declared failed
	f.Add(msg(1, agreeMsg(7, agree.Message{Inst: 1, Value: 1})))
	f.Add(msg(2, agreeMsg(9, agree.Message{Inst: 2})))
	f.Add(msg(9, []byte{kindProbe}))
	f.Add(msg(1, []byte{kindNotice, 'x'}))
	f.Add(msg(1, []byte{kindBcast, 200}))
	f.Fuzz(func(t *testing.T, in []byte) {
		now := time.Unix(1000, 0)
		m, err := newMachine(failure.Config{}, 0, 4, false, now)
		if err != nil {
			t.Fatal(err)
		}
		m.addComm(now, 7, []ftrma.Rank{0, 1, 2, 3})
		m.addComm(now, 8, []ftrma.Rank{2, 0})
		m.startAgree(now, 7, 1, 1)
		for len(in) >= 2 {
			from, n := ftrma.Rank(int(in[0])-1), int(in[1])
			in = in[2:]
			n = min(n, len(in))
			body := in[:n]
			in = in[n:]
			now = now.Add(10 * time.Millisecond)
			if len(body) > 0 && body[0] == kindBcast {
				m.unseen(body)
				failureNotice(body)
			}
			m.step(now, from, body)
			if len(in)%5 == 0 {
				m.tick(now)
			}
			if len(in)%7 == 0 {
				m.addComm(now, 9, []ftrma.Rank{1, 0})
			}
			for _, o := range m.ready().Send {
				if len(o.msg) == 0 || o.to < 0 || int(o.to) >= 4 {
					t.Fatalf("the machine sends %x to rank %d", o.msg, o.to)
				}
				if o.msg[0] == kindBcast {
					if _, err := revoke.ParseMessage(o.msg[1:]); err != nil {
						t.Fatalf("the machine broadcasts %x, which does not parse: %v", o.msg, err)
					}
				}
			}
			m.advance()
		}
	})
}
