//go:build !race

package envoyrls_test

// raceEnabled: the race detector is off.
const raceEnabled = false
