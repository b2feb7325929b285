// Package bolt is Sluice's durable backend on bbolt (go.etcd.io/bbolt), a
// single-file B+tree with copy-on-write pages: records survive restarts, and
// every commit is crash-safe unless Options.NoSync says otherwise.
//
// # On-disk layout (format version 1)
//
// A store is one bbolt file, sluice.db, in its own directory, holding two
// buckets:
//
//	sluice.db
//	├── bucket "meta"
//	│   └── "format" → "1"           the format version, ASCII decimal
//	└── bucket "records"
//	    └── record key → ┌──────────────────────┬──────────────────┐
//	                     │ expiresAt            │ record           │
//	                     │ int64 big-endian (8) │ rest of value    │
//	                     └──────────────────────┴──────────────────┘
//
// expiresAt is Unix nanoseconds; zero or less means the record never
// expires. A stored value shorter than 8 bytes is corrupt: Get treats it as
// absent, the sweeper removes it, and Range reports it with ExpiresAt 0 and
// the raw stored bytes as its Value. Other buckets are reserved for later
// formats. bbolt limits keys to 32 KiB.
//
// Open initialises a new or empty file with format version 1 and refuses,
// with an error wrapping ErrFormat that names the directory and the version,
// a file whose version it does not know (one written by a later release) or a
// bbolt file with other buckets and no version (not a Sluice store). The
// version 1 layout never changes; a release that needs another layout gives
// it a new version and migrates version 1 stores on Open.
//
// # Durability
//
// Every call that writes (Put, Delete, WriteBatch, a sweep chunk) is one
// bbolt read-write transaction. bbolt commits a transaction by writing its
// new pages and then its meta page with write(2), and by default calls
// fdatasync after each of the two. So by default every write, whether Put or
// WriteBatch with or without sync, is on stable storage when it returns and
// survives a crash of the process or of the machine; a Put costs two
// fdatasyncs (a few milliseconds on most disks). Sluice's durability modes
// are built on WriteBatch, one transaction per flush interval or per group
// of concurrent callers, so they pay that once per batch, not per decision.
//
// Options.NoSync skips both fdatasyncs, for speed. The pages still reach the
// operating system's page cache through write(2) before the commit returns,
// so a crash of the process (even SIGKILL) loses nothing that has returned.
// A crash of the operating system or a power loss is another matter: without
// the fdatasync between data pages and meta page, the disk may hold a meta
// page that points at pages never written, or at pages a later transaction
// has already reused, so the whole file can be corrupt, including records
// written by an earlier synced WriteBatch. With NoSync, WriteBatch(sync=true)
// calls fdatasync after its commit, so its records are on disk when it
// returns, but that promise holds only until the next unsynced commit. Use
// NoSync when losing the store on a machine crash is acceptable (a cache of
// limits that can start fresh), not for the engine's sync mode.
//
// # A full disk
//
// A write that fails because the disk is full returns an error naming the
// file that wraps backend.ErrNoSpace; bbolt rolls the transaction back, and
// the store takes the next write as soon as there is room.
//
// # Expiry
//
// A record whose expiry has passed reads as absent at once. A background
// sweeper removes expired records: every Options.SweepInterval it walks the
// records from its cursor to the end in chunks of Options.SweepBatch. Each
// chunk is read in a read-only transaction; if it found expired records, one
// read-write transaction checks them again and deletes those still expired,
// so the writer lock is held for at most SweepBatch lookups and deletes.
// Store.Sweep runs one chunk on demand. The file does not shrink, but the
// pages freed by sweeping are reused by later writes, so its size follows
// the peak number of live keys.
//
// # Concurrency
//
// A Store is safe for concurrent use by many goroutines. Reads run in
// parallel; writes are serialised by bbolt (one writer at a time). The file
// is locked (flock) against every other Store, in this process or another,
// until Close: a second Open waits up to Options.Timeout and then returns an
// error wrapping backend.ErrLocked. Close waits for the calls in progress and
// for the sweeper, and makes every later call return backend.ErrClosed.
package bolt
