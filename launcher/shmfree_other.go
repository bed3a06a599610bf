//go:build !linux

package launcher

// shmFree is unknown here; the shared-memory transport needs Linux anyway.
func shmFree() (uint64, bool) { return 0, false }
