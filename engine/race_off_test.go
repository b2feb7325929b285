//go:build !race

package engine_test

// raceEnabled: the race detector is off.
const raceEnabled = false
