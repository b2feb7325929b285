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
// The wrapper implements exactly the optional interfaces the wrapped backend
// implements among backend.Striped, backend.Batcher, backend.Loader,
// backend.Counter, backend.Ranger, backend.Sweeper,
// backend.EvictionCounter and backend.Swapper, so an engine over a wrapped
// Pebble or bbolt store still runs its durable tier, one over a wrapped
// memory store still uses the store's partitions as its stripes, and one
// over a wrapped Swapper commits by compare-and-swap. A wrapped Striped
// store is also a backend.Extender, which forwards to the wrapped store when
// it is one and lengthens nothing otherwise. (The engine calls a
// bare *memory.Store without an interface; over the wrapper it takes the
// same striped path through backend.Striped.)
//
// Faults is safe for concurrent use, and rules may be added and removed
// while calls are in flight.
package faulty
