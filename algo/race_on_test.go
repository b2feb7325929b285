//go:build race

package algo

// raceEnabled: the race detector is on, and tests of single-goroutine
// arithmetic against slow brute-force models run fewer examples (their full
// count runs in the normal build).
const raceEnabled = true
