//go:build !unix

package replay_test

// cpuSeconds is not measured here.
func cpuSeconds() float64 { return 0 }
