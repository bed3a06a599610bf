//go:build !race

package tcp

// raceBuild reports a race-detector build (see race.go).
const raceBuild = false
