//go:build linux && !(amd64 || arm64 || ppc64 || ppc64le || riscv64 || loong64 || s390x || mips64 || mips64le)

package shm

import (
	"sync/atomic"
	"unsafe"
)

// storeWord stores v into the aligned word at p whole: 32-bit platforms split
// plain 8-byte stores, so this one is atomic.
func storeWord(p *byte, v uint64) { atomic.StoreUint64((*uint64)(unsafe.Pointer(p)), v) }

// loadWord loads the aligned word at p whole.
func loadWord(p *byte) uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(p))) }
