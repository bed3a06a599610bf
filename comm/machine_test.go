package comm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/failure"
	"github.com/ftrma/ftrma/revoke"
	"github.com/ftrma/ftrma/transport"
)

// What a peer-down proves (classifyDown): under ftrun only its own exit
// notice (or its mark on a reaped rank's shared memory) proves a failure, and a goodbye is a goodbye; the transport's own
// losses — timeouts, resets, EOF, fencing, anything else — are suspicions.
// Without ftrun every loss but a goodbye is a failure, as it always was.
func TestClassifyDown(t *testing.T) {
	exit := fmt.Errorf("launcher: the process of rank 3 exited (%w): %w", transport.ErrExitReported, ftrma.ErrProcFailed)
	tests := []struct {
		name       string
		err        error
		ftrun, not downKind // under ftrun, and without it
	}{
		{"goodbye", transport.ErrPeerDown(3, transport.ErrPeerLeft), downLeft, downLeft},
		{"ftrun's exit notice", exit, downFailed, downFailed},
		{"ftrun's exit notice, through the transport", transport.ErrPeerDown(3, exit), downFailed, downFailed},
		{"ftrun's mark on shared memory", transport.ErrPeerDown(3, transport.ErrPeerExited), downFailed, downFailed},
		{"timeout", transport.ErrPeerDown(3, fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)), downSuspect, downFailed},
		{"ETIMEDOUT", transport.ErrPeerDown(3, &os.SyscallError{Syscall: "read", Err: syscall.ETIMEDOUT}), downSuspect, downFailed},
		{"reset", transport.ErrPeerDown(3, &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}), downSuspect, downFailed},
		{"EOF", transport.ErrPeerDown(3, io.EOF), downSuspect, downFailed},
		{"fenced by the peer", transport.ErrPeerDown(3, errors.New("the peer fenced this rank")), downSuspect, downFailed},
		{"queue pair in error", transport.ErrPeerDown(3, errors.New("verbs: work completion status 12 (retry exceeded)")), downSuspect, downFailed},
		{"no cause", transport.ErrPeerDown(3, nil), downSuspect, downFailed},
		{"bare ErrProcFailed", ftrma.ErrProcFailed, downSuspect, downFailed},
		{"nil", nil, downSuspect, downFailed},
	}
	for _, tt := range tests {
		if got := classifyDown(tt.err, true); got != tt.ftrun {
			t.Errorf("%s under ftrun: %v, want %v", tt.name, got, tt.ftrun)
		}
		if got := classifyDown(tt.err, false); got != tt.not {
			t.Errorf("%s without ftrun: %v, want %v", tt.name, got, tt.not)
		}
	}
}

// A machine under a confirmer reports a peer the transport lost as a
// suspect, again every four Timeouts while no verdict comes, without
// counting it failed or telling anyone; ftrun's exit notice then makes it a
// failure, not announced again (ftrun tells every rank), and the reports
// stop. Without a confirmer the same loss is a failure at once, announced.
func TestMachineTransportLossIsSuspicion(t *testing.T) {
	cfg := failure.Config{Period: 20 * time.Millisecond, Timeout: 60 * time.Millisecond, AwaitConfirmation: true}
	t0 := time.Unix(1000, 0)
	m, err := newMachine(cfg, 0, 4, true, t0)
	if err != nil {
		t.Fatal(err)
	}
	m.stalled(time.Hour) // keep the detector's own suspicions out of the way
	m.advance()
	reset := transport.ErrPeerDown(2, &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET})
	m.peerDown(t0, 2, reset)
	rd := m.ready()
	m.advance()
	if !slices.Equal(rd.Suspected, []ftrma.Rank{2}) || len(rd.Failed) != 0 || m.isFailed(2) || broadcasts(rd) != 0 {
		t.Fatalf("after a reset under ftrun: suspected %v, failed %v (isFailed %v), %d broadcasts; want rank 2 suspected only",
			rd.Suspected, rd.Failed, m.isFailed(2), broadcasts(rd))
	}
	m.peerDown(t0.Add(time.Millisecond), 2, reset) // a second event: no second report yet
	if rd := m.ready(); len(rd.Suspected) != 0 {
		t.Fatalf("a repeated loss reported again at once: %v", rd.Suspected)
	}
	m.advance()
	if dl, ok := m.deadline(); !ok || dl.After(t0.Add(240*time.Millisecond)) {
		t.Fatalf("deadline %v, %v; want the next report by 4 Timeouts", dl.Sub(t0), ok)
	}
	m.tick(t0.Add(240 * time.Millisecond))
	rd = m.ready()
	m.advance()
	if !slices.Contains(rd.Suspected, 2) || m.isFailed(2) {
		t.Fatalf("4 Timeouts later: suspected %v, isFailed %v; want rank 2 reported again", rd.Suspected, m.isFailed(2))
	}
	exit := fmt.Errorf("launcher: the process of rank 2 exited (%w): %w", transport.ErrExitReported, ftrma.ErrProcFailed)
	m.peerDown(t0.Add(300*time.Millisecond), 2, exit)
	rd = m.ready()
	m.advance()
	if len(rd.Failed) != 1 || rd.Failed[0].rank != 2 || !m.isFailed(2) || broadcasts(rd) != 0 {
		t.Fatalf("after ftrun's notice: failed %v, %d broadcasts; want rank 2 failed and not announced again", rd.Failed, broadcasts(rd))
	}
	m.tick(t0.Add(time.Second))
	if rd := m.ready(); slices.Contains(rd.Suspected, 2) {
		t.Fatalf("rank 2 reported after ftrun confirmed it")
	}

	// Without a confirmer: a failure at once.
	m, err = newMachine(failure.Config{}, 0, 4, false, t0)
	if err != nil {
		t.Fatal(err)
	}
	m.advance()
	m.peerDown(t0, 2, reset)
	rd = m.ready()
	if len(rd.Suspected) != 0 || len(rd.Failed) != 1 || !m.isFailed(2) || broadcasts(rd) == 0 {
		t.Fatalf("without ftrun: suspected %v, failed %v, %d broadcasts; want rank 2 failed and announced", rd.Suspected, rd.Failed, broadcasts(rd))
	}
}

// broadcasts counts the reliable-broadcast messages in rd.
func broadcasts(rd machineReady) int {
	n := 0
	for _, o := range rd.Send {
		if o.msg[0] == kindBcast {
			n++
		}
	}
	return n
}

// The runtime yields before handling a new broadcast (so that copies of it
// arriving together are handled in one batch), but never for a failure
// notice, whose forwarding every downstream rank's detection waits for.
func TestNoYieldForFailureNotices(t *testing.T) {
	m, err := newMachine(failure.Config{}, 0, 4, false, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	rt := &runtime{m: m}
	bcast := func(id string) event {
		return event{msg: revoke.Message{ID: id}.AppendBinary([]byte{kindBcast})}
	}
	if !rt.newBroadcast([]event{bcast("revoke/7")}) {
		t.Error("a new revocation does not make the runtime gather its copies")
	}
	if rt.newBroadcast([]event{bcast("fail/2")}) {
		t.Error("a failure notice waits for a yield before it is forwarded")
	}
}
