// Package engine applies rate-limit algorithms to keys held in a backend,
// atomically per key.
//
// For each call the engine reads the clock once, prefixes the limit's
// namespace to the caller's key (so two rules never share a counter), hashes
// the result with xxhash and takes the lock of stripe hash&(stripes-1). Under
// that lock it reads the key's record, runs the algorithm's step and writes
// the new record with the expiry the step asked for (its TTL: the time until
// the record is equivalent to none), so read-step-write is indivisible for
// every key while keys on different stripes never wait for each other.
//
// Over an in-process backend that implements backend.Striped (the memory
// backend), the backend's own partition locks are the stripes: one lock per
// decision, and the record is stepped in place without an allocation.
//
// Lock order: stripe locks are taken in ascending stripe order (ApplyAll
// takes several); no other lock is held while taking one, and no user
// callback, logging or metrics work runs under one. Over a durable backend,
// the group commit's queue mutex is taken under a stripe lock (to enqueue a
// write in order), never the other way round: the commit leader holds no
// stripe lock while it writes, and takes them only after releasing the
// queue. The tier's flush mutex is outermost: a flush takes stripe locks
// one at a time under it.
//
// An Engine is safe for concurrent use. A denial is a Decision, never an
// error; errors are the sentinel values below, wrapped with detail.
package engine
