//go:build !race

package pebble

// raceEnabled: the race detector is off.
const raceEnabled = false
