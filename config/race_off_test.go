//go:build !race

package config_test

// raceEnabled: the race detector is off.
const raceEnabled = false
