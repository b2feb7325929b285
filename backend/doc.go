// Package backend defines the contract between the Sluice engine and the
// stores that keep each caller's rate-limit record.
//
// A Backend is a byte-oriented key-value store with expiry. The engine owns
// atomicity: it calls a backend under its stripe lock, so that reading a
// record, stepping the algorithm and writing the result is indivisible for a
// key. A backend only has to be safe for concurrent use by several goroutines
// working on different keys, and to honour the expiry it was given: a record
// whose expiry has passed reads as absent at once, whether or not a sweeper
// has removed it yet.
//
// Times are Unix nanoseconds. An expiry of zero or less means the record never
// expires; otherwise a record is expired at now when expiresAt <= now.
//
// Optional capabilities let a store do better than the plain contract, and
// the engine looks for them once, when it is built: Striped, for an
// in-process store whose own partition locks can serve as the engine's
// stripe locks (one lock per decision instead of two); Batcher and Loader,
// for a durable store under the engine's in-memory tier; Swapper, for a
// store across a network that cannot lend a lock and offers an atomic
// multi-key compare-and-swap instead; Counter, EvictionCounter and Sweeper,
// for a store that can count its keys, count what it evicted, and sweep
// expired records on request; Ranger, for inspection tools.
//
// The conformance suite in backend/backendtest runs against every backend
// (Run), and against every Swapper (RunSwapper); a new backend is done when
// it passes it unchanged.
package backend
