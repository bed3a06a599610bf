//go:build race

package transport

// raceBuild: copies run many times slower under the race detector.
const raceBuild = true
