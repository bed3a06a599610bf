package launcher

import (
	"syscall"

	"github.com/ftrma/ftrma/transport/shm"
)

// shmFree returns the bytes free in the shared-memory directory.
func shmFree() (uint64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(shm.DefaultDir, &st); err != nil {
		return 0, true // no directory: no room at all
	}
	return st.Bavail * uint64(st.Bsize), true
}
