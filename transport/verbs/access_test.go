package verbs

import "testing"

// Each region is registered with the least access it needs: the key table
// can only be read by peers, staging memory not reached by peers at all,
// and registered user memory is read, written and updated atomically.
func TestAccessFlags(t *testing.T) {
	// libibverbs' values (verbs.go also checks them against the header).
	if accessLocalWrite != 1 || accessRemoteWrite != 2 || accessRemoteRead != 4 || accessRemoteAtomic != 8 {
		t.Fatal("access flags differ from enum ibv_access_flags")
	}
	remote := accessRemoteWrite | accessRemoteRead | accessRemoteAtomic
	for _, c := range []struct {
		name string
		kind regionKind
		want int
	}{
		{"key table", regionKeyTable, accessRemoteRead},
		{"staging", regionStaging, accessLocalWrite},
		{"user memory", regionUser, accessLocalWrite | remote},
	} {
		got := accessFlags(c.kind)
		if got != c.want {
			t.Errorf("%s: access %#x, want %#x", c.name, got, c.want)
		}
		// The device refuses remote write or atomic access without local
		// write.
		if got&(accessRemoteWrite|accessRemoteAtomic) != 0 && got&accessLocalWrite == 0 {
			t.Errorf("%s: remote write or atomic access %#x without local write", c.name, got)
		}
	}
	if got := accessFlags(regionKeyTable); got&(accessRemoteWrite|accessRemoteAtomic) != 0 {
		t.Errorf("the key table is remotely writable: %#x", got)
	}
	if got := accessFlags(0); got != 0 {
		t.Errorf("an unknown kind gets access %#x, want none", got)
	}
}
