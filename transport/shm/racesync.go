//go:build race

package shm

import (
	"runtime"
	"unsafe"
)

// ringSync stands, for the race detector, for every ring of every job: the
// detector does not see the atomics on shared memory that order a piece's
// writer before its reader, so a message sent through a ring and then
// acted upon (a barrier, a put a target executes into a caller's buffer)
// would look unordered. As the os package does for file descriptors, every
// put releases this one variable and every take acquires it.
var ringSync byte

func raceReleaseRing() { runtime.RaceReleaseMerge(unsafe.Pointer(&ringSync)) }

func raceAcquireRing() { runtime.RaceAcquire(unsafe.Pointer(&ringSync)) }
