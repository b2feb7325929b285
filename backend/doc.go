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
// # Paths
//
// The engine takes one of four paths over a store, chosen once when it is
// built, and each path is one interface that a store implements whole:
//
//   - Striped: an in-process store whose own partition locks serve as the
//     engine's stripe locks, so a decision takes one lock and steps its
//     record in place (the memory store).
//   - Durable: a store on disk, under the engine's in-memory tier, which
//     loads records on first use and writes them back in batches (Pebble,
//     bbolt).
//   - Swapper: a store across a network that cannot lend a lock and offers
//     an atomic multi-key compare-and-swap instead, bounded by the
//     caller's context, with its groups of keys that swap together, the
//     unit it keeps a TTL in and a watch of deletions (Redis).
//   - a plain Backend, under the engine's own stripe locks.
//
// A store implements at most one of Striped, Durable and Swapper; the
// engine refuses one that implements two. Beside its path, a store on the
// plain or the swap path may implement Stats, to count its records, and
// Sweeper, to remove expired ones on request; a Striped store does both,
// and a Durable one sweeps. Nothing else is optional: the engine never asks
// a store what it can do beyond its path. The contract is those six
// interfaces: Backend, the three paths, Stats and Sweeper.
//
// The conformance suite in backend/backendtest runs against every backend
// (Run), every Durable store (RunDurable) and every Swapper (RunSwapper); a
// new backend is done when it passes it unchanged.
package backend
