//go:build race

package arbiter

const raceEnabled = true
