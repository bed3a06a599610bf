package verbs

// Access flags of a memory registration: libibverbs' enum ibv_access_flags
// values (verbs.go checks at compile time that they match the header).
const (
	accessLocalWrite   = 1 << 0 // IBV_ACCESS_LOCAL_WRITE: the device writes it for local work (receives, read results)
	accessRemoteWrite  = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	accessRemoteRead   = 1 << 2 // IBV_ACCESS_REMOTE_READ
	accessRemoteAtomic = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
)

// regionKind is what a registered memory region is for.
type regionKind int

const (
	// regionStaging is the staging memory and receive buffers: only this
	// rank's own work requests touch it, its rkey is never published.
	regionStaging regionKind = iota + 1
	// regionKeyTable is the key table: peers read it to resolve keys and
	// never write it; only this rank's CPU does.
	regionKeyTable
	// regionUser is memory given to Register: peers read, write and update
	// it atomically.
	regionUser
)

// accessFlags returns the access a region of kind is registered with: the
// least each needs, so that a peer (or a guessed rkey) can do nothing else.
func accessFlags(kind regionKind) int {
	switch kind {
	case regionStaging:
		return accessLocalWrite
	case regionKeyTable:
		return accessRemoteRead
	case regionUser:
		// Remote write and atomic access require local write.
		return accessLocalWrite | accessRemoteWrite | accessRemoteRead | accessRemoteAtomic
	}
	return 0
}
