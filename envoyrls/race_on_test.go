//go:build race

package envoyrls_test

// raceEnabled: the race detector is on (sync.Pool then drops items at
// random, so allocation counts are not the ones pinned).
const raceEnabled = true
