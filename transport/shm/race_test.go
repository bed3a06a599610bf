//go:build linux && race

package shm

// raceBuild: copies run many times slower under the race detector.
const raceBuild = true
