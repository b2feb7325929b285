package main

import "sync"

var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

// atExit registers f to run when the program ends, normally or by fatalf,
// the last registered first, so that no child process outlives it.
func atExit(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, f)
}

func runCleanups() {
	cleanupMu.Lock()
	fs := cleanups
	cleanups = nil
	cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
