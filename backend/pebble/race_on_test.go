//go:build race

package pebble

// raceEnabled: the race detector is on. The tests whose size is most of
// their cost under it run smaller then; make test runs them at full size
// again in a normal build (make full).
const raceEnabled = true

// RaceEnabled is raceEnabled for the package's external tests.
const RaceEnabled = raceEnabled
