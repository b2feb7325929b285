//go:build !race

package bolt

// raceEnabled: the race detector is off.
const raceEnabled = false
