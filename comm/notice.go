package comm

import (
	"strconv"
	"strings"

	"github.com/ftrma/ftrma"
)

// The runtime's notices travel by the job's reliable broadcast under a
// string ID (revoke.Message.ID), beside the notices a program names itself
// (Notify). This file is the one place that writes the runtime's IDs and
// reads them back: a notice says what it is by its kind, not by a prefix
// each reader tests.
type noticeKind uint8

const (
	// otherNotice is a program's own notice (Notify with a name of its
	// own), which the runtime only records.
	otherNotice noticeKind = iota
	// failNotice ("fail/<rank>"): world rank Rank failed.
	failNotice
	// revokeNotice ("revoke/<ctx>"): communicator Ctx is revoked.
	revokeNotice
	// windowRevokeNotice ("wrevoke/<ctx>/<window>", then "/shrunk" once
	// per Shrink): window Window of communicator Ctx, or a window Shrink
	// made from it, is revoked.
	windowRevokeNotice
)

// notice is a runtime notice, parsed.
type notice struct {
	kind    noticeKind
	rank    ftrma.Rank // failNotice
	ctx     uint32     // revokeNotice, windowRevokeNotice
	window  uint64     // windowRevokeNotice
	shrinks int        // windowRevokeNotice: the Shrinks from the window Create made
}

// id is the notice's broadcast ID.
func (n notice) id() string {
	switch n.kind {
	case failNotice:
		return "fail/" + strconv.Itoa(int(n.rank))
	case revokeNotice:
		return "revoke/" + strconv.FormatUint(uint64(n.ctx), 10)
	case windowRevokeNotice:
		return "wrevoke/" + strconv.FormatUint(uint64(n.ctx), 10) + "/" + strconv.FormatUint(n.window, 10) +
			strings.Repeat("/shrunk", n.shrinks)
	}
	return ""
}

// parseNotice reads a broadcast ID: a runtime notice of its kind, or
// otherNotice for any other ID (a program's own, or malformed).
func parseNotice(id string) notice {
	kind, rest, _ := strings.Cut(id, "/")
	var n notice
	switch kind {
	case "fail":
		r, err := strconv.Atoi(rest)
		if err == nil && r >= 0 {
			n = notice{kind: failNotice, rank: ftrma.Rank(r)}
		}
	case "revoke":
		ctx, err := strconv.ParseUint(rest, 10, 32)
		if err == nil {
			n = notice{kind: revokeNotice, ctx: uint32(ctx)}
		}
	case "wrevoke":
		c, rest, _ := strings.Cut(rest, "/")
		w, rest, _ := strings.Cut(rest, "/")
		ctx, err1 := strconv.ParseUint(c, 10, 32)
		win, err2 := strconv.ParseUint(w, 10, 64)
		shrinks := strings.Count(rest, "shrunk")
		if err1 == nil && err2 == nil {
			n = notice{kind: windowRevokeNotice, ctx: uint32(ctx), window: win, shrinks: shrinks}
		}
	}
	if n.kind != otherNotice && n.id() != id {
		return notice{} // not in the form id writes: a program's own
	}
	return n
}

// revokeNoticeID is the notice that revokes communicator ctx.
func revokeNoticeID(ctx uint32) string { return notice{kind: revokeNotice, ctx: ctx}.id() }

// WindowRevokeNotice names the notice that revokes window id of this
// communicator, or, with shrinks > 0, the window that many Shrinks made
// from it (window.Window.Revoke broadcasts it with Notify).
func (c *Comm) WindowRevokeNotice(id uint64, shrinks int) string {
	return notice{kind: windowRevokeNotice, ctx: c.ctxID, window: id, shrinks: shrinks}.id()
}
