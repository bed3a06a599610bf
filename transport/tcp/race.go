//go:build race

package tcp

// raceBuild reports a race-detector build. The detector cannot see that a
// peer's write and a later read of the same memory are ordered through the
// network, so such builds land large writes word by word with atomic stores
// rather than straight from the socket.
const raceBuild = true
