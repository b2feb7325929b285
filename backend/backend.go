package backend

import (
	"context"
	"errors"
	"hash/maphash"
	"time"
)

// Errors returned by backends. Check them with errors.Is; a backend may wrap
// them with detail such as the directory or key involved.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("sluice/backend: closed")
	// ErrEmptyKey is returned when a key of length zero is given.
	ErrEmptyKey = errors.New("sluice/backend: empty key")
	// ErrFull is returned by a write that would add a key to a backend
	// already holding its configured maximum number of keys. Existing keys
	// can still be updated.
	ErrFull = errors.New("sluice/backend: full")
	// ErrCorrupt is wrapped by the error of a call that met damage in a
	// durable store's files (a page or block that does not decode, a
	// checksum that does not match): the call failed, the process did
	// not. The error names the store, the path and what was damaged; the
	// package documentation of each store says how to recover.
	ErrCorrupt = errors.New("sluice/backend: the store's files are damaged")
	// ErrLocked is returned when opening a store whose directory another
	// process holds. The error wrapping it names the directory.
	ErrLocked = errors.New("sluice/backend: directory locked by another process")
	// ErrNoSpace is wrapped by the error of a write that a durable store
	// could not make because its disk is full (or its quota used up): the
	// write failed and the store did not, and the same write succeeds once
	// there is room again. The error names the path and what failed.
	ErrNoSpace = errors.New("sluice/backend: no space left on the store's disk")
)

// Backend is the store under the engine. Implementations must be safe for
// concurrent use. Keys and values passed in may be reused by the caller as
// soon as a call returns, so a backend that keeps them must copy them.
//
// A plain Backend runs under the engine's own stripe locks; a store that
// does better implements one of the paths below (see the package doc).
type Backend interface {
	// Get returns the record stored under key, or nil and no error when
	// there is none or it has expired at now. The returned slice belongs to
	// the caller.
	Get(key []byte, now int64) ([]byte, error)

	// Put stores value under key until expiresAt (Unix nanoseconds; zero or
	// less means never), replacing any record already there.
	Put(key, value []byte, expiresAt int64) error

	// Delete removes the record under key. Deleting a missing key is not an
	// error.
	Delete(key []byte) error

	// Close releases the store. Calls after Close return ErrClosed; a second
	// Close returns nil.
	Close() error
}

// Stats is implemented by a store that counts its records. The engine
// reports them as its Stats' Keys and Evictions. Every Striped store is
// one; a store on the plain or swap path may be.
type Stats interface {
	// Len returns the number of records held, including expired ones a
	// sweeper has not removed yet.
	Len() int

	// Evictions returns the number of expired records removed since the
	// store was opened, by a background sweeper or by Sweep.
	Evictions() uint64
}

// Sweeper is implemented by a store that removes expired records on
// request as well as in the background, with this one signature, so the
// engine sweeps whatever store it runs on. Every Striped and every Durable
// store is one; a store on the plain or swap path may be.
type Sweeper interface {
	// Sweep examines at most budget records (the store's own batch size
	// when budget is zero or less), removes those expired at now and
	// returns how many it removed. Sweeping is invisible to readers:
	// expired records read as absent whether or not they have been swept.
	// Sweep takes whatever locks it needs itself: a caller must not hold a
	// stripe lock.
	Sweep(now int64, budget int) (removed int, err error)
}

// hashSeed seeds Hash, once per process: which stripe a key falls on, and
// where in a stripe, cannot be known outside the process, so no one can
// choose keys that crowd one stripe's lock.
var hashSeed = maphash.MakeSeed()

// Hash returns the hash of key that a Striped backend partitions its keys
// by and that its *Locked methods are given: hash/maphash's, seeded once
// per process. It is not stable across processes, and nothing stores it.
// (It replaced xxhash here: on keys of a few dozen bytes it returns in
// about half the time, and it is seeded.)
func Hash(key []byte) uint64 { return maphash.Bytes(hashSeed, key) }

// Striped is the in-process path: a store that partitions its keys by hash
// and lets the caller hold a partition's lock across several operations.
// The engine then uses the store's partitions as its stripes, so a
// decision takes one lock, and steps a record in place. It holds its
// records in the process's memory, so it counts them and sweeps them.
//
// The hash passed to the *Locked methods must be Hash(key) (the same hash
// the plain methods compute), and the caller must hold the lock of stripe
// hash & (Stripes()-1) for the whole call.
type Striped interface {
	Backend
	Stats
	Sweeper

	// Stripes returns the number of partitions, a power of two.
	Stripes() int

	// Lock acquires the lock of stripe i.
	Lock(i int)

	// Unlock releases the lock of stripe i.
	Unlock(i int)

	// GetLocked is Get for a caller holding the stripe lock. The returned
	// slice aliases the stored record: the caller may modify it in place
	// and pass it back to PutLocked, and must not use it after releasing
	// the lock or after any other write to the stripe.
	GetLocked(hash uint64, key []byte, now int64) ([]byte, error)

	// PutLocked is Put for a caller holding the stripe lock. value may be
	// the slice GetLocked returned for the same key.
	PutLocked(hash uint64, key, value []byte, expiresAt int64) error

	// DeleteLocked is Delete for a caller holding the stripe lock.
	DeleteLocked(hash uint64, key []byte) error

	// ExtendLocked, for a caller holding the stripe lock, sets the expiry
	// of key's record to expiresAt when the store holds it, live at now,
	// and it would expire before expiresAt; it reports whether it did. A
	// record that never expires is left so. The engine calls it after a
	// denial: a denial writes nothing, but its record may need to be kept
	// longer than the expiry it was written with. A rule whose rate was
	// lowered since refills what was spent more slowly, and a record
	// forgotten early would give its caller the whole capacity back before
	// the RetryAfter it was told.
	ExtendLocked(hash uint64, key []byte, now, expiresAt int64) (bool, error)
}

// Write is one record change in a batch.
type Write struct {
	// Key is the record's key.
	Key []byte
	// Value is the new record; ignored when Delete is set.
	Value []byte
	// ExpiresAt is the record's expiry in Unix nanoseconds; zero or less
	// means never.
	ExpiresAt int64
	// Delete removes the record instead of storing Value.
	Delete bool
}

// Record is one stored record, as Range lists it.
type Record struct {
	Key       []byte
	Value     []byte
	ExpiresAt int64
}

// Durable is the durable path: a store on disk under the engine's
// in-memory tier. The tier loads a record on first use after a restart
// (Load), keeps it until its expiry, and writes changed records back in
// batches, or in Sync mode shares one fsync among concurrent callers
// (WriteBatch: group commit). The store sweeps its own expired records in
// the background and on request, and lists them for inspection tools.
type Durable interface {
	Backend
	Sweeper

	// WriteBatch applies every write atomically, in order (a later write to
	// a key wins). With sync set it returns only once the commit is on
	// stable storage (fsync); without, a crash of the process (not of the
	// machine) loses nothing that WriteBatch has returned for. The backend
	// does not keep the slices after it returns.
	WriteBatch(writes []Write, sync bool) error

	// Load is Get that also returns the record's expiry (zero or less:
	// never). A missing or expired record is nil, 0, nil.
	Load(key []byte, now int64) (value []byte, expiresAt int64, err error)

	// Range calls fn for every record whose key is >= start, in key order,
	// including expired records not yet swept, until fn returns false. The
	// slices passed to fn are valid only during the call.
	Range(start []byte, fn func(r Record) bool) error
}

// Swap is one key's part of a CompareAndSwap.
type Swap struct {
	// Key is the record's key.
	Key []byte
	// Expected is the record the caller last saw under Key; nil means the
	// caller expects no record (absent or expired).
	Expected []byte
	// Value is the record to store when every key still holds what its
	// Swap expects; nil deletes the record.
	Value []byte
	// TTL is how long the store keeps Value, counted from the commit on the
	// store's own clock. Zero or less with a Value deletes the record: it
	// is already equivalent to none.
	TTL time.Duration
	// Keep makes the swap a comparison only: the record is left as it is,
	// and Value is ignored. The engine uses it to confirm a decision that
	// spends nothing (a denial, a peek) against the record the store
	// holds, in the same atomic step as the writes. Its expiry is left too,
	// unless TTL is positive and the record would expire sooner than TTL
	// from the commit: then it is kept until then (a denial's record must
	// outlive the wait it told its caller; see Striped.ExtendLocked).
	Keep bool
	// Announce asks the store, when the swap writes, to tell the other
	// clients watching it (WatchDeletes) that Key changed, in the same
	// atomic step: the engine sets it on a refund, whose record holds less
	// spent than the one it replaces, so that no other process goes on
	// answering a denial from the record it saw last. A store need not
	// tell a client's own watch of the client's own announcements (Redis
	// skips them); one that does must do so before the swap returns, since
	// the engine remembers the record it wrote once the swap has returned.
	// A Keep swap writes nothing and announces nothing.
	Announce bool
}

// Swapper is the compare-and-swap path: a store that cannot lend the
// engine a lock, because it lives across a network (Redis), and offers
// instead an atomic compare-and-swap over several keys. The engine then
// keeps the last record it saw per key, steps it locally, and commits with
// CompareAndSwap; on a mismatch it steps again on the records the store
// returned. Several engines, in several processes, may share the store.
type Swapper interface {
	Backend

	// CompareAndSwap writes every swap's Value (or deletes it) if, and only
	// if, every key still holds its Expected record, as one atomic step.
	// Every key of one call is of one group (SwapGroup).
	//
	// When it writes, ok is true and current is nil. When any key differs,
	// it writes nothing, ok is false, and current holds each key's record
	// as it is now (nil for an absent or expired one), in the order of
	// swaps. now is the store's own time of the step in Unix nanoseconds,
	// or zero when the store has no clock of its own. An error means the
	// outcome is unknown: the swap may or may not have been written.
	//
	// An empty swaps writes nothing and returns true, nil and the store's
	// time: the engine uses it to learn the store's clock before its first
	// decision.
	//
	// ctx bounds the call: it returns, with an error wrapping ctx.Err(),
	// once ctx is done, or at ctx's deadline when that comes before the
	// store's own deadline for a call. A call that returns so before
	// sending anything has written nothing; one already sent may have
	// been written, as after any other error. A call ended by its ctx is
	// no failure of the store's (it does not count towards a circuit
	// breaker).
	//
	// The store does not keep the slices of swaps after it returns, and
	// the slices of current belong to the caller.
	CompareAndSwap(ctx context.Context, swaps []Swap) (ok bool, current [][]byte, now int64, err error)

	// TTLUnit returns the unit a store keeps a record's Swap.TTL rounded
	// up to, a whole unit of its own (Redis: a millisecond, the unit of
	// PX), or zero when it keeps the TTL as it is. The engine then reckons
	// when the store forgets a record as the store does: a record of under
	// a unit, or in the last unit of its life, is still there, and a swap
	// expecting none would miss.
	TTLUnit() time.Duration

	// SwapGroup returns key's group: keys with equal groups may be swapped
	// together. A store atomic over any keys returns one group for all
	// ("", say); over a Redis Cluster a group is a hash slot's keys. The
	// engine sends each compare-and-swap over keys of one group only; an
	// ApplyAll whose keys lie in several groups is committed group by
	// group (see the engine's package doc for what that promises).
	SwapGroup(key []byte) string

	// WatchDeletes calls fn, from a goroutine of the store's, with the key
	// of every record deleted by Delete, through this store or another
	// client of the same one, and of every record written by another
	// client's swap with Swap.Announce, as the store learns of it: a Reset
	// or a refund in one process then reaches the last-seen records and
	// standing denials the others keep (see the engine's package doc). A
	// delete or an announcement made while the watch was broken (the store
	// unreachable) may be missed. stop ends the watch; fn is not called
	// after stop returns.
	WatchDeletes(fn func(key []byte)) (stop func(), err error)

	// Range is Durable.Range: every record whose key is >= start, in key
	// order, with its expiry, for inspection tools and for clearing a
	// store's records.
	Range(start []byte, fn func(r Record) bool) error
}
