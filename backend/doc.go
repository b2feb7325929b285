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
// Two optional capabilities let a store do better than the plain contract,
// and the engine prefers them when present: Striped, for an in-process store
// whose own partition locks can serve as the engine's stripe locks (one lock
// per decision instead of two), and Counter, for a store that knows how many
// live keys it holds.
//
// The conformance suite in backend/backendtest runs against every backend; a
// new backend is done when it passes it unchanged.
package backend
