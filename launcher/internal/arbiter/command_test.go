package arbiter

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

var sampleCommands = []Command{
	{Kind: CmdRankExited, Rank: 0, Code: 0},
	{Kind: CmdRankExited, Rank: 5, Code: -9},
	{Kind: CmdRankExited, Rank: maxRank - 1, Code: 1<<31 - 1},
	{Kind: CmdRankFailed, Rank: 300, Reason: ReasonUnresponsive},
	{Kind: CmdRankFailed, Rank: 1, Reason: ReasonHostFailed},
	{Kind: CmdHostFailed, Host: 0, Reason: ReasonHostSilent},
	{Kind: CmdHostFailed, Host: 70000, Reason: ReasonProbeUnanswered},
	{Kind: CmdSpareAdmitted, Rank: 64, Host: 3},
	{Kind: CmdSpareClaimed, Rank: 9, Host: 2, By: 1, Payload: "replace 3"},
	{Kind: CmdSpareClaimed, Rank: 9, Host: 0, By: 0},
	{Kind: CmdSpareJoined, Rank: 9, Addr: "198.18.0.3:4567"},
	{Kind: CmdAddresses, Rank: 0, Addrs: []string{"198.18.0.1:1", "198.18.0.2:2", "shm"}},
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range sampleCommands {
		b, err := c.AppendBinary([]byte{0xee})
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != 0xee {
			t.Fatalf("%v: AppendBinary overwrote its prefix", c)
		}
		got, err := ParseCommand(b[1:])
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("%v: encoded % x, parsed %v, %v", c, b[1:], got, err)
		}
	}
}

func TestParseCommandRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"unknown kind", []byte{9, 1}},
		{"kind zero", []byte{0}},
		{"short", []byte{byte(CmdRankExited), 1}},
		{"truncated varint", []byte{byte(CmdRankFailed), 0x80}},
		{"trailing", append(Command{Kind: CmdHostFailed, Host: 1, Reason: ReasonHostSilent}.encode(), 0)},
		{"no reason", []byte{byte(CmdRankFailed), 1, 0}},
		{"unknown reason", []byte{byte(CmdHostFailed), 1, byte(reasonEnd)}},
		{"rank out of range", Command{Kind: CmdRankFailed, Rank: maxRank, Reason: ReasonUnresponsive}.encode()},
		{"host out of range", Command{Kind: CmdSpareAdmitted, Rank: 1, Host: maxRank}.encode()},
		{"exit code too large", Command{Kind: CmdRankExited, Rank: 1, Code: 1 << 31}.encode()},
		{"overlong varint", []byte{byte(CmdSpareAdmitted), 0x81, 0x00, 1}},
		{"claim by out of range", Command{Kind: CmdSpareClaimed, Rank: 1, Host: 1, By: maxRank}.encode()},
		{"payload over the bound", Command{Kind: CmdSpareClaimed, Rank: 1, Host: 1, Payload: strings.Repeat("p", MaxPayload+1)}.encode()},
		{"payload longer than the command", []byte{byte(CmdSpareClaimed), 1, 1, 1, 5, 'a'}},
		{"empty joined address", Command{Kind: CmdSpareJoined, Rank: 1}.encode()},
		{"address over the bound", Command{Kind: CmdSpareJoined, Rank: 1, Addr: strings.Repeat("a", MaxAddr+1)}.encode()},
		{"no addresses", Command{Kind: CmdAddresses, Rank: 1}.encode()},
		{"more addresses than bytes", []byte{byte(CmdAddresses), 0, 100, 1, 'a'}},
		{"addresses past the last rank", Command{Kind: CmdAddresses, Rank: maxRank - 1, Addrs: []string{"a", "b"}}.encode()},
	} {
		if c, err := ParseCommand(tc.b); err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ParseCommand(% x) = %v, %v; want ErrMalformed", tc.name, tc.b, c, err)
		}
	}
}

// FuzzParseCommand: ParseCommand never panics, and what it accepts encodes
// back to the same bytes (one encoding per command, so every node applies
// the same thing).
func FuzzParseCommand(f *testing.F) {
	for _, c := range sampleCommands {
		f.Add(c.encode())
	}
	f.Add([]byte{byte(CmdRankExited), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCommand(b)
		if err != nil {
			return
		}
		if again := c.encode(); !bytes.Equal(again, b) {
			t.Fatalf("ParseCommand(% x) = %v, which encodes to % x", b, c, again)
		}
		s := newState(4, []int{0, 1, 2, 3})
		s.apply(c, 3, nil)
	})
}

func sampleMessages() []Message {
	return []Message{
		{From: 1, To: 2, Kind: KindLeaseAsk, Seq: 7},
		{From: 2, To: 1, Kind: KindLeaseGrant, Seq: 7, Term: time.Second, Epoch: 3},
		{From: 4, To: 1, Kind: KindSuspect, Rank: 12, By: 3},
		{From: 1, To: 3, Kind: KindRaft, stamp: 1234567, hasStamp: true, raft: &raftpb.Message{
			Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(3)), Term: new(uint64(2)),
			Entries: []*raftpb.Entry{{Term: new(uint64(2)), Index: new(uint64(3)), Data: Command{Kind: CmdHostFailed, Host: 2, Reason: ReasonHostSilent}.encode()}},
		}},
		{From: 3, To: 1, Kind: KindRaft, raft: &raftpb.Message{Type: raftpb.MsgHeartbeatResp.Enum(), From: new(uint64(3)), To: new(uint64(1))}},
		// A proposal passed on by a follower keeps its proposer.
		{From: 2, To: 1, Kind: KindRaft, raft: &raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(uint64(3)), To: new(uint64(1)),
			Entries: []*raftpb.Entry{{Data: []byte{1, 2, 3}}}}},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		b, err := m.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseMessage(b)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		b2, _ := got.AppendBinary(nil)
		if !bytes.Equal(b, b2) || got.String() != m.String() {
			t.Errorf("%v: parsed back as %v", m, got)
		}
	}
	for _, b := range [][]byte{
		nil,
		{byte(KindLeaseAsk), 0, 1, 1},    // from node 0
		{byte(KindLeaseAsk), 1, 2},       // no seq
		{byte(KindLeaseAsk), 1, 2, 1, 0}, // trailing
		{9, 1, 2},                        // unknown kind
		{byte(KindRaft), 1, 2, 2},        // bad flags
		{byte(KindRaft), 1, 2, 0, 0xff},  // not protobuf
		{byte(KindSuspect), 1, 2, 0xff, 0xff, 0xff, 0x7f, 0}, // rank out of range
	} {
		if m, err := ParseMessage(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseMessage(% x) = %v, %v; want ErrMalformed", b, m, err)
		}
	}
	// A raft message addressed to another node than its envelope's.
	m := sampleMessages()[3]
	m.To = 2
	b, _ := m.AppendBinary(nil)
	if _, err := ParseMessage(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("a raft message for node 3 in an envelope for node 2 parsed: %v", err)
	}
	// A local raft message never travels.
	m = Message{From: 1, To: 2, Kind: KindRaft, raft: &raftpb.Message{Type: raftpb.MsgHup.Enum(), From: new(uint64(1)), To: new(uint64(2))}}
	b, _ = m.AppendBinary(nil)
	if _, err := ParseMessage(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("a MsgHup parsed: %v", err)
	}
}

// FuzzParseMessage: ParseMessage never panics, and a Node fed whatever it
// accepts does not panic either.
func FuzzParseMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		b, _ := m.AppendBinary(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMessage(b)
		if err != nil {
			return
		}
		now := time.Unix(1000, 0)
		n, err := New(Config{ID: 1, Hosts: 5, RankHost: []int{0, 1, 2, 3, 4}}, now)
		if err != nil {
			t.Fatal(err)
		}
		m.To = 1
		if m.Kind == KindRaft {
			m.raft.To = new(uint64(1))
			if m.raft.GetType() != raftpb.MsgProp {
				m.raft.From = new(m.From)
			}
		}
		_ = n.Step(m, now.Add(time.Millisecond))
		n.Tick(now.Add(50 * time.Millisecond))
	})
}
