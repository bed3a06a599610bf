package e2e

import (
	"io/fs"
	"syscall"
)

// fileOwner is the uid that owns fi's file, or -1.
func fileOwner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
