//go:build unix

package replay_test

import "syscall"

// cpuSeconds returns the CPU time the process has used, user and system,
// every thread's: a measure of work that a busy machine does not inflate
// as it does the wall clock.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
