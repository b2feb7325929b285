// Package pebble is Sluice's durable backend on CockroachDB's Pebble, an LSM
// key-value store: records survive restarts, writes are cheap, and many keys
// live on disk rather than in memory.
//
// # On-disk layout (format version 1)
//
// A store is one Pebble database in its own directory. Keys are split by
// their first byte:
//
//	key                          value
//	──────────────────────────   ─────────────────────────────────────────────
//	0x00 "meta/format"           "1"   the format version, ASCII decimal
//	0x01 record key              ┌──────────────────────┬──────────────────┐
//	                             │ expiresAt            │ record           │
//	                             │ int64 big-endian (8) │ rest of value    │
//	                             └──────────────────────┴──────────────────┘
//	0x02 … 0xff                  reserved for later formats
//
// expiresAt is Unix nanoseconds; zero or less means the record never
// expires. A stored value shorter than 8 bytes is corrupt: Get treats it as
// absent, the sweeper removes it, and Range reports it with ExpiresAt 0 and
// the raw stored bytes as its Value.
//
// Open initialises an empty directory with format version 1 and refuses, with
// an error wrapping ErrFormat that names the directory and the version, a
// store whose version it does not know (one written by a later release) or a
// Pebble database with keys but no version (not a Sluice store). The version 1
// layout never changes; a release that needs another layout gives it a new
// version and migrates version 1 stores on Open.
//
// # Durability
//
// Put and Delete commit with pebble.NoSync: they return once the change is in
// Pebble's memtable and in its write-ahead log buffer, which lives in this
// process's memory until a 32 KiB log block fills or something syncs the
// log. A background syncer does that every Options.SyncInterval (100 ms by
// default) when unsynced writes are pending. So a crash of the process or
// of the machine loses at most the Puts and Deletes of the last
// SyncInterval, plus those made during the sync in progress. (Without the
// syncer a killed process would lose every unsynced write since the last
// full block or sync, however old: they never reached the operating system.)
//
// WriteBatch always commits with pebble.Sync, whether or not sync is set:
// Pebble has no way to hand its log buffer to the operating system without
// also syncing it, and backend.Durable promises that an unsynced batch
// survives a crash of the process. So when WriteBatch returns, its writes,
// and every write committed before it, are on stable storage and survive a
// crash of the process or of the machine. Sluice's durability modes are
// built on WriteBatch: in sync mode one batch per group of concurrent
// callers, in interval mode one batch per flush interval, so the fsync is
// paid once per batch, never per decision.
//
// # A full disk
//
// A write that fails because the disk is full returns an error naming the
// directory that wraps backend.ErrNoSpace; nothing panics and nothing ends
// the process. Pebble answers a failed write of its write-ahead log by
// giving up on the log for good (its logger's Fatalf, which by default ends
// the process); the store keeps reading from the database and fails every
// write until, at a write once the file system has room to replay the log
// (tried at most twice a second), it closes the database and opens it
// again, which replays every commit that reached the log. A write that
// failed is the caller's to make again: the engine keeps such records in
// memory and writes them at its next flush.
//
// # Expiry
//
// A record whose expiry has passed reads as absent at once. A background
// sweeper removes expired records: every Options.SweepInterval it walks the
// key space from its cursor to the end in chunks of Options.SweepBatch
// records. Each chunk is read through an iterator without blocking anyone;
// if it found expired records, the sweeper then takes the store's write gate,
// checks each candidate again (so a record rewritten since the read is never
// deleted) and deletes those still expired in one unsynced batch (a crash
// may bring swept records back; they are still expired, so nothing reads
// them). Store.Sweep runs one chunk on demand. Deleted records leave tombstones that Pebble's
// compactions drop, so disk use follows the number of live keys.
//
// # Concurrency
//
// A Store is safe for concurrent use by many goroutines, and its directory is
// locked against every other Store, in this process or another, until Close:
// a second Open returns an error wrapping backend.ErrLocked. Close waits for
// the calls in progress and for the sweeper, and makes every later call
// return backend.ErrClosed.
package pebble
