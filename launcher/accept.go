package launcher

import (
	"errors"
	"net"
	"time"
)

// acceptEach accepts connections on ln and hands each to handle, until ln
// is closed, quit (may be nil) is closed, or handle returns false. An
// Accept that fails otherwise is temporary trouble (out of file
// descriptors, a connection reset before it was taken): it is logged
// through logf, naming what, and retried after a backoff of 5 ms doubling
// to 1 s, never ending the loop, so that a moment of descriptor exhaustion
// does not leave ranks without their rendezvous, agents or lease endpoint.
// handle runs on the loop's goroutine: it starts its own for work that
// blocks.
func acceptEach(ln net.Listener, quit <-chan struct{}, what string, logf func(string, ...any), handle func(net.Conn) bool) {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			logf("%s: accept: %v; retrying in %v", what, err, backoff)
			select {
			case <-quit:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		if !handle(c) {
			return
		}
	}
}
