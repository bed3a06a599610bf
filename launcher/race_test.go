//go:build race

package launcher

// raceEnabled says the tests were built with -race; process tests then build
// ftrun with -race too.
const raceEnabled = true
