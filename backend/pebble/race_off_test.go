//go:build !race

package pebble

// raceEnabled: the race detector is off.
const raceEnabled = false

// RaceEnabled is raceEnabled for the package's external tests.
const RaceEnabled = raceEnabled
