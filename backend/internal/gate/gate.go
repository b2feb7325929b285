// Package gate is the open-or-closed state a durable store (backend/bolt,
// backend/pebble) shares between its calls, its background goroutines and
// Close: calls in progress finish before Close goes on, calls after Close
// get backend.ErrClosed, and Close stops the background goroutines and
// waits for them.
package gate

import (
	"sync"

	"github.com/sluice-go/sluice/backend"
)

// Gate admits a store's calls until Close. Create it with New; it is safe
// for concurrent use.
type Gate struct {
	mu     sync.RWMutex // guards closed; shared by every call admitted, exclusive in Close
	closed bool

	stop chan struct{}  // closed by Close
	bg   sync.WaitGroup // the goroutines started by Go
}

// New returns an open Gate.
func New() *Gate { return &Gate{stop: make(chan struct{})} }

// Enter admits a call, which must then call Leave once it is done with the
// store's database; once the gate is closed it returns backend.ErrClosed
// and admits nothing.
func (g *Gate) Enter() error {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return backend.ErrClosed
	}
	return nil
}

// Leave ends a call Enter admitted.
func (g *Gate) Leave() { g.mu.RUnlock() }

// Stop returns a channel closed when Close begins: the background
// goroutines' signal to return.
func (g *Gate) Stop() <-chan struct{} { return g.stop }

// Go runs fn in a goroutine that Close waits for; fn should return soon
// after Stop is closed.
func (g *Gate) Go(fn func()) { g.bg.Go(fn) }

// Close waits for the calls admitted to leave, admits no more, closes Stop
// and waits for the goroutines started by Go. It reports whether it closed
// the gate: false when it was closed already. The store then closes its
// database.
func (g *Gate) Close() bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.closed = true
	g.mu.Unlock()
	close(g.stop)
	g.bg.Wait()
	return true
}

// Hold waits for the calls admitted to leave, runs fn while admitting no
// other, and returns nil; a store replaces its database in fn. Once the gate
// is closed it returns backend.ErrClosed without calling fn. A call that
// Enter admitted must not call Hold.
func (g *Gate) Hold(fn func()) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return backend.ErrClosed
	}
	fn()
	return nil
}
