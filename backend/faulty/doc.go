// Package faulty wraps a backend.Backend for tests: it fails, delays, holds
// or corrupts the calls a test chooses, and otherwise forwards every call
// unchanged.
//
// Wrap returns the wrapper and a *Faults that controls it. A Rule picks calls
// by operation (Get, PutLocked, WriteBatch, Load, CompareAndSwap, ...), by a predicate on the
// call (its key, its number among calls of that operation), after letting a
// number of matching calls through, for a number of times or until removed;
// and says what happens to them: an error instead of the call, a delay or a
// hold (until a channel closes) before it, or other bytes in place of the
// record a read returns.
//
// There is one wrapper per path of package backend, and each implements
// its path whole: a wrapped backend.Striped (the memory store) is a
// backend.Striped, so an engine over it still uses the store's partitions
// as its stripes, through the interface (the engine calls a bare
// *memory.Store without one, and takes the same steps); a wrapped
// backend.Durable (Pebble, bbolt) is a backend.Durable, under the engine's
// in-memory tier; a wrapped backend.Swapper is a backend.Swapper, so the
// engine commits by compare-and-swap over the store's groups of keys and
// hears of the deletions the store's watch reports; and a plain store is a
// plain store. A plain or swap store's backend.Stats and backend.Sweeper
// are forwarded when it has them. An engine over a wrapper therefore takes
// the path it takes over the wrapped store, call for call.
//
// Faults is safe for concurrent use, and rules may be added and removed
// while calls are in flight.
package faulty
