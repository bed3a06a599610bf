package comm

// SetIDHash replaces how candidate context ids are derived, for tests that
// force collisions; restore puts the real derivation back. f gets the
// parent's context id, the call's kind ("dup", "split", "shrink"), the
// agreement instance, the group (Split's color, else 0) and the candidate's
// number j (0, 1, ...: the lowest free one wins). Not safe while
// communicators are being made.
func SetIDHash(f func(parent uint32, kind string, inst uint64, group int64, j int) uint32) (restore func()) {
	old := idHash
	idHash = f
	return func() { idHash = old }
}

// IDHash is the real derivation of candidate context ids.
var IDHash = idHash

// IDCandidates is the number of candidates one agreement votes on.
const IDCandidates = idCandidates
