package memory

import (
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/table"
)

// ErrTooLarge is returned by a write whose key or value is longer than 1 GiB,
// or whose entry would grow a shard's arena past 4 GiB.
var ErrTooLarge = table.ErrTooLarge

// Defaults used for the zero value of each Options field (see
// table.Options for each).
const (
	DefaultShards        = table.DefaultShards
	ShardsPerProc        = table.ShardsPerProc
	DefaultSweepInterval = table.DefaultSweepInterval
	DefaultSweepBatch    = table.DefaultSweepBatch
)

// Options configures a Store: its shards, its bound on keys and its
// sweeper. A nil *Options, and the zero value of each field, mean the
// documented default.
type Options = table.Options

// Stats are counters describing a Store, for metrics.
type Stats = table.Stats

// Store is an in-process backend.Striped that keeps every record in memory:
// a table.Table, the table the engine's in-memory tier keeps its records in
// too, with the methods of the store contract. All methods are safe for
// concurrent use; the *Locked methods additionally require the caller to
// hold the key's stripe lock, as backend.Striped documents.
//
// Values returned by Get are copies owned by the caller; Put copies its
// arguments. GetLocked returns a slice aliasing the stored record, valid
// until the stripe lock is released or the stripe is written.
type Store table.Table

var _ backend.Striped = (*Store)(nil)

// New returns an empty Store configured by opts (nil means defaults) and,
// unless opts disables it, starts its background sweeper. Close stops it.
func New(opts *Options) *Store { return (*Store)(table.New(opts)) }

// Table returns the table s is. The engine decides on it directly, making
// the calls it makes through backend.Striped without an interface, and
// stepping a record where it lies.
func (s *Store) Table() *table.Table { return (*table.Table)(s) }

// Get returns a copy of the record under key, or nil and no error when there
// is none or it has expired at now.
func (s *Store) Get(key []byte, now int64) ([]byte, error) { return s.Table().Get(key, now) }

// Put stores a copy of value under key until expiresAt (Unix nanoseconds;
// zero or less means never), replacing any record there. It returns
// backend.ErrFull when key is new and the store holds Options.MaxKeys keys.
func (s *Store) Put(key, value []byte, expiresAt int64) error {
	return s.Table().Put(key, value, expiresAt)
}

// Delete removes the record under key; a missing key is not an error.
func (s *Store) Delete(key []byte) error { return s.Table().Delete(key) }

// Close stops the sweeper, waiting for it to return, and releases every
// shard's memory. Every later call returns backend.ErrClosed (Lock and
// Unlock still work). A second Close returns nil.
func (s *Store) Close() error { return s.Table().Close() }

// Stripes returns the number of shards, a power of two.
func (s *Store) Stripes() int { return s.Table().Stripes() }

// Lock acquires the lock of shard i, 0 <= i < Stripes().
func (s *Store) Lock(i int) { s.Table().Lock(i) }

// Unlock releases the lock of shard i.
func (s *Store) Unlock(i int) { s.Table().Unlock(i) }

// GetLocked is Get for a caller holding the lock of shard
// hash&(Stripes()-1), where hash is backend.Hash(key). The returned slice
// aliases the stored record: it may be modified in place and passed back to
// PutLocked, and must not be used after the lock is released or the shard
// is written. It never allocates.
func (s *Store) GetLocked(hash uint64, key []byte, now int64) ([]byte, error) {
	return s.Table().GetLocked(hash, key, now)
}

// PutLocked is Put for a caller holding the lock of shard
// hash&(Stripes()-1). value may alias the slice GetLocked returned for key.
// A record of the length it replaces is rewritten in place without
// allocating.
func (s *Store) PutLocked(hash uint64, key, value []byte, expiresAt int64) error {
	return s.Table().PutLocked(hash, key, value, expiresAt)
}

// DeleteLocked is Delete for a caller holding the lock of shard
// hash&(Stripes()-1).
func (s *Store) DeleteLocked(hash uint64, key []byte) error {
	return s.Table().DeleteLocked(hash, key)
}

// ExtendLocked lengthens the expiry of key's record to expiresAt when the
// store holds it, live at now, and it would expire before then; it reports
// whether it did. A record that never expires is left so.
func (s *Store) ExtendLocked(hash uint64, key []byte, now, expiresAt int64) (bool, error) {
	return s.Table().ExtendLocked(hash, key, now, expiresAt)
}

// Len returns the number of keys held, including expired ones not yet
// swept. It takes no lock: keys added or removed while it runs may or may
// not be counted.
func (s *Store) Len() int { return s.Table().Len() }

// Evictions returns the number of expired keys removed so far, as
// Stats().Evicted.
func (s *Store) Evictions() uint64 { return s.Table().Evictions() }

// Sweep runs one bounded step of expiry sweeping at now, examining at most
// budget keys (Options.SweepBatch when budget is zero or less), and returns
// the number of keys removed. It takes shard locks itself, so it must not
// be called while holding one.
func (s *Store) Sweep(now int64, budget int) (removed int, err error) {
	return s.Table().Sweep(now, budget)
}

// Stats returns the store's counters. It takes no lock.
func (s *Store) Stats() Stats { return s.Table().Stats() }
