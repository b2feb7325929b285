// Package memory is Sluice's in-process backend: a striped, expiring
// key-value store that keeps about a million rate-limit records in under
// 80 bytes each, key included, and steps a hot record in place without
// allocating.
//
// # Layout
//
// The store is split into shards (256 by default, or 64 per GOMAXPROCS
// where that is more), chosen by the low bits of the key's backend.Hash.
// The engine uses the shards as its stripes, through backend.Striped, so
// one lock covers a whole read-step-write. Each shard holds a mutex, an
// index and an arena:
//
//	index  []uint64, linear probing, load kept between 1/5 and 4/5
//	       slot = fp<<32 | off     fp = hash>>32, off = entry offset; 0 = empty
//	       home slot = f(fp, seed) so resizing never reads the arena
//
//	arena  []byte, append-only; arena[0] is a pad byte so off is never 0
//	       ┌──────────────┬──────┬──────┬──────┬─────────┬──────────────────┐
//	entry  │ expiresAt    │ klen │ vcap │ vlen │ key     │ value            │
//	       │ int64 LE (8) │ uvar │ uvar │ uvar │ klen B  │ vcap B, vlen used│
//	       └──────────────┴──────┴──────┴──────┴─────────┴──────────────────┘
//	       vlen is padded to vcap's width so it can be rewritten in place.
//
// A 20-byte key with a 17-byte value takes a 48-byte entry and one 8-byte
// slot (10 to 16 bytes at the index's load), plus at most a quarter of
// arena slack. Neither the index nor the arena holds a pointer, so the
// garbage collector never scans them.
//
// The full key is kept and compared on every lookup whose fp matches: keys
// whose hashes collide, even on all 64 bits, occupy separate slots and stay
// distinct. The home slot is seeded per store, so a caller who can choose
// keys cannot pile them onto one probe run without finding full 32-bit
// fingerprint collisions.
//
// # Writes
//
// Writing a value of the same length as the one stored (the common case: an
// algorithm's record keeps its size) rewrites the entry in place, touching
// no allocator; so does any length that fits the space reserved for the
// value without leaving most of a sizeable reserve idle. GetLocked remembers
// the entry it found, so the PutLocked that follows for the same key, and
// the next GetLocked of a hot key, skip the probe (the key is still
// compared). The engine's own decision takes a shorter way: LookupLocked
// returns the record with a Ref to its entry, the record is stepped where
// it lies, and Ref.SetExpiryLocked, inlined in the caller, writes only its
// expiry (PutRefLocked covers every other case, with no second lookup). A
// key's first record is built in 32 bytes the shard lends and copied in. A
// value that no longer fits is
// appended as a new entry with a quarter of headroom and the old one becomes
// dead bytes. When dead bytes exceed half of a shard's arena (and 4 KiB),
// that shard alone is compacted: its live entries are copied into a
// right-sized arena, so the pause is bounded by the shard's size, not the
// store's. A shard left empty releases its memory.
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
// to hold it. A decision on a key the store holds writes only its shard's
// lock line (the lock and the memo of the entry last found share it) and
// the record's own bytes: no count shared by the shards (keys are counted
// per shard and summed by Len; only a store bounded by MaxKeys also keeps
// the store-wide count it reserves room with, which only new keys write). Close is idempotent, waits for the sweeper to stop and frees
// every shard; all later calls return backend.ErrClosed.
package memory
