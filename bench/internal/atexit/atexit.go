// Package atexit runs what a benchmark command registered when the
// command ends, normally or by a fatal error, so that no process it
// started (a served gateway, a redis-server, a peer) outlives it.
package atexit

import "sync"

var (
	mu  sync.Mutex
	fns []func()
)

// Register adds f to what Run runs.
func Register(f func()) {
	mu.Lock()
	defer mu.Unlock()
	fns = append(fns, f)
}

// Run runs what was registered, the last registered first, once each.
func Run() {
	mu.Lock()
	fs := fns
	fns = nil
	mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
