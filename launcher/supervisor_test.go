package launcher

import (
	"testing"
	"time"
)

// The host supervisor's grant rule: no grant while the node does not act
// or once its host lease has ended; otherwise the lease term, cut to what
// remains of the host lease.
func TestSupervisorGrant(t *testing.T) {
	const term = time.Second
	now := time.Unix(1000, 0)
	tests := []struct {
		name   string
		acting bool
		left   time.Duration // leaseEnd - now
		want   time.Duration
		ok     bool
	}{
		{"not acting", false, 10 * time.Second, 0, false},
		{"not acting, lease run out", false, -time.Second, 0, false},
		{"acting, long lease", true, 10 * time.Second, term, true},
		{"acting, lease of exactly a term", true, term, term, true},
		{"acting, lease shorter than a term", true, 300 * time.Millisecond, 300 * time.Millisecond, true},
		{"acting, lease ends now", true, 0, 0, false},
		{"acting, lease run out", true, -time.Millisecond, 0, false},
		{"never held a lease", true, -now.Sub(time.Time{}), 0, false},
	}
	for _, tt := range tests {
		got, ok := supervisorGrant(tt.acting, now.Add(tt.left), now, term)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: supervisorGrant = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
		if ok && (got > term || now.Add(got).After(now.Add(tt.left))) {
			t.Errorf("%s: a grant of %v outlives the term or the host lease", tt.name, got)
		}
	}
}
