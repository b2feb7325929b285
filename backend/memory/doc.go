// Package memory is Sluice's in-process backend: a striped, expiring
// key-value store that keeps about a million rate-limit records in under
// 80 bytes each, key included, and steps a hot record in place without
// allocating.
//
// # Layout
//
// The store is a table.Table, the sharded table the engine's in-memory
// tier over a durable store keeps its records in too; package table draws
// its layout and says how a write stays in place. In short: the store is
// split into shards (256 by default, or 64 per GOMAXPROCS where that is
// more) by the low bits of the key's backend.Hash, each with its own
// mutex, an open-addressing index of 8-byte slots and an append-only arena
// of entries; the engine uses the shards as its stripes, so one lock
// covers a whole read-step-write. A 20-byte key with a 17-byte value takes
// a 48-byte entry and one 8-byte slot (10 to 16 bytes at the index's
// load), plus at most a quarter of arena slack. Writing a record of the
// length it replaces, the common case, rewrites it in place without
// allocating.
//
// # Expiry
//
// A record whose expiry has passed reads as absent at once. A background
// sweeper frees expired records incrementally: every Options.SweepInterval it
// examines every key held, in steps that visit each shard once and examine
// at most Options.SweepBatch keys there, walking the index from a per-shard
// cursor, so no lock is held for a scan of the whole store and decisions
// interleave with the sweep. Because a run covers every key, however many
// arrived since the last, an expired key is freed within about two
// intervals: memory is bounded by the keys live within their TTL even under
// a flood of new keys. Store.Sweep runs one bounded step on demand.
//
// # Capacity
//
// Options.MaxKeys caps the number of keys. A full store refuses new keys with
// backend.ErrFull and keeps updating the keys it holds; it never evicts a
// live key to make room, because evicting a record resets that caller's
// spent budget, and an attacker able to create keys could then reset a
// victim's limit by flooding the store. Before refusing, it sweeps a batch
// of the key's shard for keys expired as of the latest time a reader passed
// to that shard (no clock is read under a shard lock).
//
// # Concurrency
//
// A Store is safe for concurrent use. Get, Put and Delete take their shard's
// lock themselves; the *Locked methods of backend.Striped expect the caller
// to hold it. A decision on a key the store holds that spends writes only
// its shard's lock line (the lock, its sequence and the memo of the entry
// last found share it) and the record's own bytes; one that denies writes
// nothing at all on amd64, where it reads the record without the lock
// (table.ReadUnlocked); and no decision writes a count shared by the shards (keys are counted
// per shard and summed by Len; only a store bounded by MaxKeys also keeps
// the store-wide count it reserves room with, which only new keys write). Close is idempotent, waits for the sweeper to stop and frees
// every shard; all later calls return backend.ErrClosed.
package memory
