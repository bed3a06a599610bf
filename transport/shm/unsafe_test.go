//go:build linux

package shm

import "unsafe"

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func unsafeSlice(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }
