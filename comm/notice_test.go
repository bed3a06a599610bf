package comm

import "testing"

// Every runtime notice reads back as what it was written from, and an ID
// that is not in the runtime's form (a program's own) is otherNotice: a
// program's "fail/x" revokes nothing and fails nobody.
func TestNoticeRoundTrip(t *testing.T) {
	for _, n := range []notice{
		{kind: failNotice, rank: 0},
		{kind: failNotice, rank: 4095},
		{kind: revokeNotice, ctx: 7},
		{kind: revokeNotice, ctx: 1<<32 - 1},
		{kind: windowRevokeNotice, ctx: 3, window: 12},
		{kind: windowRevokeNotice, ctx: 3, window: 1 << 40, shrinks: 2},
	} {
		if got := parseNotice(n.id()); got != n {
			t.Errorf("%q reads back as %+v, want %+v", n.id(), got, n)
		}
	}
	for _, id := range []string{"", "ftkv/stop", "fail/", "fail/x", "fail/-1", "fail/03", "revoke/1/2", "revoke/4294967296",
		"wrevoke/1", "wrevoke/1/2/grown", "wrevoke/1/2/shrunk/", "failed/3"} {
		if got := parseNotice(id); got.kind != otherNotice {
			t.Errorf("%q reads as a runtime notice %+v", id, got)
		}
	}
}
