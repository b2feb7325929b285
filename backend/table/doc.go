// Package table is the sharded, expiring table of records that the memory
// store is and that the engine keeps its in-memory tier in, over a durable
// store: about a million rate-limit records in under 80 bytes each, key
// included, a hot record stepped in place without allocating.
//
// A Table is a backend.Striped, and more: for a caller holding a stripe
// lock, LookupLocked returns a key's record with a Ref to its entry, so
// that the record is stepped where it lies and written back without a
// second lookup (Ref.SetExpiryLocked, PutRefLocked). The engine decides on
// the table of a bare memory store this way, and the memory store's own
// methods are the table's.
//
// # Layout
//
// The table is split into shards (256 by default, or 64 per GOMAXPROCS
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
// distinct. The home slot is seeded per table, so a caller who can choose
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
// value that no longer fits is appended as a new entry with a quarter of
// headroom and the old one becomes dead bytes. When dead bytes exceed half of a shard's arena (and 4 KiB),
// that shard alone is compacted: its live entries are copied into a
// right-sized arena, so the pause is bounded by the shard's size, not the
// table's. A shard left empty releases its memory.
//
// # Concurrency
//
// A Table is safe for concurrent use. Get, Put and Delete take their
// shard's lock themselves; the *Locked methods, and Ref's, expect the
// caller to hold it. A background sweeper (Options.SweepInterval) frees
// expired records a bounded batch at a time (see package memory for the
// promise). Close is idempotent, waits for the sweeper to stop and frees
// every shard; all later calls return backend.ErrClosed.
//
// ReadUnlocked copies a record without the lock, for a decision that
// expects to deny and so to write nothing. Each shard keeps a sequence
// (odd while its lock is held: lock and unlock add one) and a view of its
// index and arena published whenever either is reallocated; the copy
// counts when the sequence read before and after it is the same even
// value, and every offset it follows is checked against the view's bounds
// first, so a read racing a writer is refused, never torn. It exists on
// amd64 without the race detector (UnlockedReads); elsewhere every
// decision takes the lock. What a decision writes and reads:
//
//	spends (under the lock)   writes: the shard's lock line (lock, sequence,
//	                                  memo) and the record's bytes
//	                          reads:  the view line, an index slot, the entry
//	denies (read unlocked)    writes: nothing
//	                          reads:  the lock line (the sequence, twice),
//	                                  the view line, an index slot, the entry
//
// Which way a decision goes is a hint per shard (Denying, SetDenying) on
// the view's line, stored only when the outcome of the shard's decisions
// changes: after a denial the shard's next decision is read unlocked,
// after a spend it takes the lock at once, so a shard whose callers are
// being allowed never reads the lock's line before writing it.
package table
