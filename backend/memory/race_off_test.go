//go:build !race

package memory_test

// raceEnabled: the race detector is off.
const raceEnabled = false
