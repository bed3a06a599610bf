package launcher

import (
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
)

// flakyListener fails its first Accepts with EMFILE, as a process out of
// descriptors does, then accepts from the listener it wraps.
type flakyListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// Accept errors other than a closed listener are ridden out (logged, then
// retried), and the connections after them are handed over; closing the
// listener ends the loop. Three of the six loops ended at the first such
// error before they shared acceptEach (the ranks' lease endpoint among
// them).
func TestAcceptEachRidesOutTrouble(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &flakyListener{Listener: inner, fails: 3}
	got := make(chan net.Conn, 1)
	var logged []string
	var mu sync.Mutex
	logf := func(format string, a ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		acceptEach(ln, nil, "test", logf, func(c net.Conn) bool { got <- c; return true })
		close(done)
	}()
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-got
	s.Close()
	inner.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 3 {
		t.Fatalf("logged %q, want the 3 failed accepts", logged)
	}
}
