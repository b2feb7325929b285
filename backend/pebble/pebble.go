package pebble

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/internal/dirlock"
	"github.com/sluice-go/sluice/backend/internal/frame"
	"github.com/sluice-go/sluice/backend/internal/gate"
	"github.com/sluice-go/sluice/backend/internal/walk"
)

// FormatVersion is the on-disk format version this release writes and reads.
const FormatVersion = 1

// Defaults used for the zero value of each Options field.
const (
	DefaultSweepInterval = walk.DefaultInterval // 10 s
	DefaultSweepBatch    = walk.DefaultBatch    // 1000
	DefaultSyncInterval  = 100 * time.Millisecond
	// DefaultCacheSize is 64 MiB, eight times Pebble's own default. A
	// flood of new callers is a stream of lookups of keys that are not
	// there, each answered by the bloom filter and index blocks of the
	// tables; with 8 MiB those blocks do not stay cached, and lookups
	// read them from disk. Measured with `go run ./internal/cmd/flood
	// -backend pebble -keys 1000000`: 80,000 new keys a second with 8 MiB,
	// 147,000 with 32 MiB, 186,000 with 64 MiB.
	DefaultCacheSize = 64 << 20
)

// ErrFormat is returned by Open when the directory holds a store whose format
// version this release does not know, or a Pebble database that is not a
// Sluice store. The error wrapping it names the directory and the version.
var ErrFormat = errors.New("sluice/backend/pebble: unsupported store format")

// Key space; see the package documentation for the layout.
const (
	recordPrefix = 0x01 // first byte of every record key
	recordEnd    = 0x02 // exclusive upper bound of record keys
	rangeChunk   = 256  // records Range copies out per iterator
)

// metaFormatKey holds the store's format version.
var metaFormatKey = []byte("\x00meta/format")

// Options configures a Store. A nil *Options, and the zero value of each
// field, mean the documented default.
type Options struct {
	// SweepInterval is how often the background sweeper walks the store
	// and removes expired records, in chunks of SweepBatch. Zero means ten
	// seconds; a negative value disables the sweeper, and expired records
	// are then removed only by explicit calls to Sweep (they read as
	// absent regardless).
	SweepInterval time.Duration

	// SweepBatch is the number of records one sweep chunk examines, and so
	// the most records one chunk deletes in one batch. Zero or less means
	// 1000.
	SweepBatch int

	// SyncInterval bounds how long an unsynced Put or Delete stays only in
	// this process's memory: a background goroutine syncs Pebble's
	// write-ahead log this often when such writes are pending, so a crash
	// of the process or of the machine loses at most the last SyncInterval
	// of them. Zero means 100 ms; a negative value disables the syncer,
	// and unsynced writes then reach the disk only with the next
	// WriteBatch, a full 32 KiB log block, or Close.
	SyncInterval time.Duration

	// Now is the sweeper's clock, in Unix nanoseconds. Nil means
	// time.Now().UnixNano().
	Now func() int64

	// CacheSize is the size of Pebble's block cache, in bytes. Zero or less
	// means DefaultCacheSize.
	CacheSize int64

	// MemTableSize is the size of one Pebble memtable, in bytes: writes
	// are buffered in memory up to this much before they are flushed to a
	// table file. Zero means Pebble's default, 4 MiB.
	MemTableSize uint64
}

// Store is a backend.Durable on a Pebble database. It does not implement
// backend.Stats: Pebble cannot count its keys without reading them all.
//
// Get returns a copy the caller owns; Put, Delete and WriteBatch copy their
// arguments. Durability is described in the package documentation: Put and
// Delete are not synced, WriteBatch always is.
//
// Lock order: the sweeper's, then the gate, then writeMu.
type Store struct {
	db   *pebbledb.DB
	lock *pebbledb.Lock
	dir  string        // as given to Open, for messages
	hold *dirlock.Held // this process's claim on dir

	gate *gate.Gate // admits every call using db; Close shuts it

	// writeMu is shared by every write and taken exclusively by a sweep
	// while it re-checks and deletes expired records, so that no write
	// lands between the check and the delete.
	writeMu sync.RWMutex

	dirty atomic.Bool // set by unsynced writes, cleared by the syncer

	sweeper *walk.Sweeper // its cursor is a prefixed record key

	log *pebbleLog // Pebble's logger, which records a Fatalf (damage.go)

	// popts is what Open gave Pebble, kept to reopen a stuck database
	// (stuck.go).
	popts *pebbledb.Options
	// reopenMu serialises reopening; it guards lastReopen, the time of
	// the last attempt.
	reopenMu   sync.Mutex
	lastReopen time.Time
}

var _ backend.Durable = (*Store)(nil)

// Open opens the store in dir, creating dir and an empty store (format
// version 1) if needed, and starts the background sweeper and log syncer
// that opts does not disable. nil opts means defaults.
//
// Open returns an error naming dir when dir cannot be created or written,
// an error wrapping backend.ErrLocked when another Store, in this process or
// another, has dir open, and an error wrapping ErrFormat when dir holds a
// store of an unknown format version.
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	h, err := opened.Open(dir)
	if err != nil {
		return nil, err
	}
	lock, err := pebbledb.LockDirectory(dir, vfs.Default)
	if err != nil {
		h.Release()
		return nil, lockError(dir, err)
	}
	plog := &pebbleLog{dir: dir}
	popts := &pebbledb.Options{
		Lock:          lock,
		Logger:        plog,
		MemTableSize:  o.MemTableSize,
		EventListener: &pebbledb.EventListener{DataCorruption: plog.corruption, BackgroundError: plog.backgroundError, FlushEnd: plog.flushEnd},
	}
	popts.CacheSize = DefaultCacheSize
	if o.CacheSize > 0 {
		popts.CacheSize = o.CacheSize
	}
	// Every Get is a point lookup of a key that usually exists in one
	// table only: a bloom filter (10 bits per key, 1% false positives)
	// spares reading the blocks of the others. Later levels inherit it.
	popts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	s := &Store{
		lock:  lock,
		dir:   dir,
		hold:  h,
		gate:  gate.New(),
		log:   plog,
		popts: popts,
	}
	if err := s.open(popts); err != nil {
		lock.Close()
		h.Release()
		return nil, err
	}
	s.sweeper = walk.NewSweeper(o.SweepBatch, o.Now, s.sweepRead, s.sweepDelete)
	s.sweeper.Start(s.gate, o.SweepInterval)
	if o.SyncInterval > 0 {
		s.gate.Go(func() { s.syncer(o.SyncInterval) })
	}
	return s, nil
}

// open opens the database and checks its format, turning damage met on the
// way into an error wrapping backend.ErrCorrupt.
func (s *Store) open(popts *pebbledb.Options) (err error) {
	defer s.catch("open", &err, debug.SetPanicOnFault(true))
	db, err := pebbledb.Open(s.dir, popts)
	if err != nil {
		if isDamage(err) {
			return err // catch words it
		}
		return fmt.Errorf("sluice/backend/pebble: open %q: %w", s.dir, err)
	}
	// Pebble may have met damage, maybe in a goroutine of its own.
	if err = s.poisoned("open"); err == nil {
		err = checkFormat(db, s.dir)
	}
	if err != nil {
		if s.log.closable() {
			db.Close()
		}
		return err
	}
	s.db = db
	return nil
}

// checkFormat initialises an empty database with FormatVersion and refuses
// one of another version.
func checkFormat(db *pebbledb.DB, dir string) error {
	v, c, err := db.Get(metaFormatKey)
	if err == nil {
		version := string(v)
		c.Close()
		if version == strconv.Itoa(FormatVersion) {
			return nil
		}
		return fmt.Errorf("%w: %q holds format version %q; this release reads version %d only (a newer release wrote it?)",
			ErrFormat, dir, version, FormatVersion)
	}
	if !errors.Is(err, pebbledb.ErrNotFound) {
		return fmt.Errorf("sluice/backend/pebble: open %q: reading the format version: %w", dir, err)
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("sluice/backend/pebble: open %q: %w", dir, err)
	}
	empty := !it.First()
	records := !empty && len(it.Key()) > 0 && it.Key()[0] == recordPrefix
	if err := it.Close(); err != nil {
		return fmt.Errorf("sluice/backend/pebble: open %q: %w", dir, err)
	}
	if records {
		// Sluice's records without the format version Open writes
		// first: the table or log entry that held it is lost.
		return damaged(dir, "open", "it holds records but no format version")
	}
	if !empty {
		return fmt.Errorf("%w: %q holds a Pebble database without a Sluice format version; not a Sluice store?", ErrFormat, dir)
	}
	if err := db.Set(metaFormatKey, []byte(strconv.Itoa(FormatVersion)), pebbledb.Sync); err != nil {
		return fmt.Errorf("sluice/backend/pebble: open %q: writing the format version: %w", dir, err)
	}
	return nil
}

// keyBufs recycles the buffers Get builds prefixed keys in.
var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64); return &b }}

// Get returns a copy of the record under key, or nil and no error when there
// is none, it has expired at now, or its stored value is corrupt.
func (s *Store) Get(key []byte, now int64) ([]byte, error) {
	v, _, err := s.Load(key, now)
	return v, err
}

// Load is Get that also returns the record's expiry (backend.Durable).
func (s *Store) Load(key []byte, now int64) (_ []byte, _ int64, err error) {
	defer s.catch("get", &err, debug.SetPanicOnFault(true))
	if err := s.poisoned("get"); err != nil {
		return nil, 0, err
	}
	if len(key) == 0 {
		return nil, 0, backend.ErrEmptyKey
	}
	kb := keyBufs.Get().(*[]byte)
	k := append(append((*kb)[:0], recordPrefix), key...)
	defer func() { *kb = k; keyBufs.Put(kb) }()

	if err := s.enter("get"); err != nil {
		return nil, 0, err
	}
	defer s.gate.Leave()
	v, c, err := s.db.Get(k)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("sluice/backend/pebble: get: %w", err)
	}
	rec, exp := frame.Live(v, now)
	c.Close()
	return rec, exp, nil
}

// setRecord adds the record to b.
func setRecord(b *pebbledb.Batch, key, value []byte, expiresAt int64) {
	op := b.SetDeferred(1+len(key), frame.HeaderLen+len(value))
	op.Key[0] = recordPrefix
	copy(op.Key[1:], key)
	frame.Put(op.Value, value, expiresAt)
	op.Finish()
}

// deleteRecord adds the deletion of key's record to b.
func deleteRecord(b *pebbledb.Batch, key []byte) {
	op := b.DeleteDeferred(1 + len(key))
	op.Key[0] = recordPrefix
	copy(op.Key[1:], key)
	op.Finish()
}

// Put stores a copy of value under key until expiresAt (Unix nanoseconds;
// zero or less means never), replacing any record there. It does not sync;
// the background syncer makes it durable within Options.SyncInterval (see
// the package documentation for what a crash loses).
func (s *Store) Put(key, value []byte, expiresAt int64) error {
	return s.writeOne("put", key, func(b *pebbledb.Batch) { setRecord(b, key, value, expiresAt) })
}

// writeOne applies the one-key batch fill builds, unsynced, and marks the
// store dirty for the syncer; op names the operation in errors.
func (s *Store) writeOne(op string, key []byte, fill func(*pebbledb.Batch)) (err error) {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	defer s.catch(op, &err, debug.SetPanicOnFault(true))
	if err := s.poisoned(op); err != nil {
		return err
	}
	if err := s.unstick(op); err != nil {
		return err
	}
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.gate.Leave()
	b := s.db.NewBatch()
	defer b.Close()
	fill(b)
	s.writeMu.RLock()
	defer s.writeMu.RUnlock()
	if err := s.db.Apply(b, pebbledb.NoSync); err != nil {
		return fmt.Errorf("sluice/backend/pebble: %s: %w", op, err)
	}
	s.dirty.Store(true)
	return nil
}

// Delete removes the record under key; a missing key is not an error. It
// does not sync, like Put.
func (s *Store) Delete(key []byte) error {
	return s.writeOne("delete", key, func(b *pebbledb.Batch) { deleteRecord(b, key) })
}

// WriteBatch applies writes atomically and in order (a later write to a key
// wins) in one Pebble batch, and returns once the batch is synced to stable
// storage, whatever sync says (see the package documentation for why). A
// write with an empty key fails the whole batch with backend.ErrEmptyKey
// before anything is written. An empty batch with sync set syncs every
// write committed before it, Puts and Deletes included.
func (s *Store) WriteBatch(writes []backend.Write, sync bool) (err error) {
	for i := range writes {
		if len(writes[i].Key) == 0 {
			return fmt.Errorf("sluice/backend/pebble: write batch: write %d: %w", i, backend.ErrEmptyKey)
		}
	}
	defer s.catch("write batch", &err, debug.SetPanicOnFault(true))
	if err := s.poisoned("write batch"); err != nil {
		return err
	}
	if err := s.unstick("write batch"); err != nil {
		return err
	}
	if err := s.enter("write batch"); err != nil {
		return err
	}
	if len(writes) == 0 {
		defer s.gate.Leave()
		if !sync {
			return nil
		}
		// An empty synced batch is a barrier: it syncs every write
		// committed before it.
		if err := s.db.LogData(nil, pebbledb.Sync); err != nil {
			return fmt.Errorf("sluice/backend/pebble: write batch: %w", err)
		}
		return nil
	}
	size := 0
	for i := range writes {
		size += 16 + len(writes[i].Key) + len(writes[i].Value)
	}
	b := s.db.NewBatchWithSize(size)
	for i := range writes {
		w := &writes[i]
		if w.Delete {
			deleteRecord(b, w.Key)
		} else {
			setRecord(b, w.Key, w.Value, w.ExpiresAt)
		}
	}
	s.writeMu.RLock()
	// Sync even when sync is false: see the package documentation. The
	// commit runs in a goroutine of its own, which leaves the gate and
	// the lock when it ends: Pebble may hold it, with no error, while its
	// flushes fail on a full disk (stuck.go), and then WriteBatch returns
	// the full-disk error without waiting for it. The commit lands later,
	// once a flush succeeds, before any commit that follows it; until
	// then Close waits for it.
	done := make(chan error, 1)
	go func() {
		defer s.gate.Leave()
		defer b.Close()
		defer s.writeMu.RUnlock()
		done <- s.applySynced(b)
	}()
	tick := time.NewTicker(stallPoll)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if err := s.flushError("write batch"); err != nil {
				return err
			}
		}
	}
}

// stallPoll is how often WriteBatch, waiting for its commit, looks whether
// Pebble's flushes fail on a full disk.
const stallPoll = 10 * time.Millisecond

// applySynced applies b, synced, guarded.
func (s *Store) applySynced(b *pebbledb.Batch) (err error) {
	defer s.catch("write batch", &err, debug.SetPanicOnFault(true))
	if err := s.db.Apply(b, pebbledb.Sync); err != nil {
		return fmt.Errorf("sluice/backend/pebble: write batch: %w", err)
	}
	return nil
}

// Range calls fn for every record whose key is >= start, in key order,
// including expired records not yet swept, until fn returns false. A
// corrupt record is reported with ExpiresAt 0 and its raw stored bytes as
// Value. The slices passed to fn are valid only during the call.
//
// Range reads the store in chunks and calls fn between them, holding no lock
// and no iterator, so fn may call the Store. It does not see one snapshot:
// a record written during Range may or may not be listed.
func (s *Store) Range(start []byte, fn func(r backend.Record) bool) error {
	return walk.Range(append([]byte{recordPrefix}, start...), s.rangeChunk, fn)
}

// rangeChunk copies out up to rangeChunk records from lower on. next is the
// prefixed key to continue from, nil at the end.
func (s *Store) rangeChunk(lower []byte) (recs []backend.Record, next []byte, err error) {
	defer s.catch("range", &err, debug.SetPanicOnFault(true))
	if err := s.poisoned("range"); err != nil {
		return nil, nil, err
	}
	if err := s.enter("range"); err != nil {
		return nil, nil, err
	}
	defer s.gate.Leave()
	it, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: lower, UpperBound: []byte{recordEnd}})
	if err != nil {
		return nil, nil, fmt.Errorf("sluice/backend/pebble: range: %w", err)
	}
	valid := it.First()
	for ; valid && len(recs) < rangeChunk; valid = it.Next() {
		v, verr := it.ValueAndErr()
		if verr != nil {
			break // the iterator keeps the error for Close
		}
		recs = append(recs, frame.Record(it.Key()[1:], v))
	}
	if valid && len(recs) == rangeChunk {
		next = append([]byte(nil), it.Key()...)
	}
	if err := it.Close(); err != nil {
		return nil, nil, fmt.Errorf("sluice/backend/pebble: range: %w", err)
	}
	return recs, next, nil
}

// Close stops the sweeper, waits for the calls in progress and closes the
// database, releasing the directory's lock. Later calls return
// backend.ErrClosed; a second Close returns nil.
func (s *Store) Close() (err error) {
	if !s.gate.Close() {
		return nil
	}
	if err := s.poisoned("close"); err != nil {
		// Pebble met damage: its state is past use. Close it unless that
		// would wait on a goroutine Fatalf ended (the process then keeps
		// what Pebble holds), and release the directory.
		if s.log.closable() {
			s.closeDB()
		}
		s.lock.Close()
		s.hold.Release()
		return err
	}
	if s.db != nil {
		err = s.closeDB()
		if serr := s.stuck("close"); serr != nil {
			// A stuck database's Close reports the log's failed write;
			// say what it was.
			err = serr
		}
	} else {
		err = s.stuck("close") // a reopen failed: nothing is open
	}
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	s.hold.Release()
	if err != nil && !strings.HasPrefix(err.Error(), "sluice/backend/pebble: ") {
		return fmt.Errorf("sluice/backend/pebble: close %q: %w", s.dir, err)
	}
	return err
}

// syncer syncs the write-ahead log every interval when unsynced writes are
// pending, until Close. A failed sync is retried on the next tick.
func (s *Store) syncer(interval time.Duration) {
	walk.Every(s.gate.Stop(), interval, func() {
		if !s.dirty.Swap(false) {
			return
		}
		if s.unstick("sync") != nil || s.enter("sync") != nil {
			s.dirty.Store(true)
			return
		}
		defer s.gate.Leave()
		if err := s.syncLog(); err != nil {
			s.dirty.Store(true)
		}
	})
}

// syncLog syncs the write-ahead log, guarded.
func (s *Store) syncLog() (err error) {
	defer s.catch("sync", &err, debug.SetPanicOnFault(true))
	if err := s.poisoned("sync"); err != nil {
		return err
	}
	return s.db.LogData(nil, pebbledb.Sync)
}

// closeDB closes the database, guarded.
func (s *Store) closeDB() (err error) {
	defer s.catch("close", &err, debug.SetPanicOnFault(true))
	return s.db.Close()
}
