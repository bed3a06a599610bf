//go:build linux && (amd64 || arm64 || ppc64 || ppc64le || riscv64 || loong64 || s390x || mips64 || mips64le)

package shm

import "unsafe"

// storeWord stores v into the aligned word at p with one whole-word store: on
// 64-bit platforms an aligned 8-byte store is never torn, and it costs far
// less than a sequentially consistent atomic store.
func storeWord(p *byte, v uint64) { *(*uint64)(unsafe.Pointer(p)) = v }

// loadWord loads the aligned word at p with one whole-word load.
func loadWord(p *byte) uint64 { return *(*uint64)(unsafe.Pointer(p)) }
