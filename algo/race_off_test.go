//go:build !race

package algo

// raceEnabled: the race detector is off.
const raceEnabled = false
