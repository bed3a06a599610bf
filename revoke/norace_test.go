//go:build !race

package revoke

const raceEnabled = false
