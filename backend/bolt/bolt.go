package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/internal/dirlock"
	"github.com/sluice-go/sluice/backend/internal/frame"
	"github.com/sluice-go/sluice/backend/internal/gate"
	"github.com/sluice-go/sluice/backend/internal/walk"
)

// FormatVersion is the on-disk format version this release writes and reads.
const FormatVersion = 1

// FileName is the name of the bbolt file a store keeps in its directory.
const FileName = "sluice.db"

// Defaults used for the zero value of each Options field.
const (
	DefaultSweepInterval = walk.DefaultInterval // 10 s
	DefaultSweepBatch    = walk.DefaultBatch    // 1000
	DefaultTimeout       = 100 * time.Millisecond
)

// ErrFormat is returned by Open when the file holds a store whose format
// version this release does not know, or a bbolt file that is not a Sluice
// store. The error wrapping it names the directory and the version.
var ErrFormat = errors.New("sluice/backend/bolt: unsupported store format")

// Buckets and keys; see the package documentation for the layout.
var (
	metaBucket    = []byte("meta")
	formatKey     = []byte("format")
	recordsBucket = []byte("records")
)

// rangeChunk is the number of records Range copies out per read
// transaction.
const rangeChunk = 256

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
	// the most records one write transaction of the sweeper deletes. Zero
	// or less means 1000.
	SweepBatch int

	// Now is the sweeper's clock, in Unix nanoseconds. Nil means
	// time.Now().UnixNano().
	Now func() int64

	// Timeout is how long Open waits for another process to release the
	// file's lock before it gives up with backend.ErrLocked. Zero means
	// 100 ms; a negative value means a single attempt.
	Timeout time.Duration

	// NoSync commits without fdatasync. A crash of the process still loses
	// nothing that has returned, but a crash of the machine or a power
	// loss can corrupt the whole file; see the package documentation.
	// THIS IS UNSAFE for a store that must survive a machine crash. The
	// default, false, syncs every commit.
	NoSync bool
}

// Store is a backend.Durable on a bbolt file. It does not implement
// backend.Stats: bbolt cannot count a bucket's keys without walking it.
//
// Get returns a copy the caller owns (bbolt's own slices are valid only
// inside its transaction); Put, Delete and WriteBatch do not keep their
// arguments. Durability is described in the package documentation: by
// default every write is synced.
//
// Lock order: the sweeper's, then the gate.
type Store struct {
	db     *bbolt.DB
	dir    string        // as given to Open, for messages
	hold   *dirlock.Held // this process's claim on dir
	noSync bool

	gate *gate.Gate // admits every call using db; Close shuts it

	sweeper *walk.Sweeper

	// broken is the damage the first write transaction to meet one
	// met, which every later write returns (updateTx).
	broken atomic.Pointer[error]
}

var _ backend.Durable = (*Store)(nil)

// Open opens the store in dir (the file dir/sluice.db), creating dir and an
// empty store (format version 1) if needed, and, unless opts disables it,
// starts the background sweeper. nil opts means defaults.
//
// Open returns an error naming dir when dir cannot be created or written,
// an error wrapping backend.ErrLocked when another Store, in this process or
// another, has the file open, and an error wrapping ErrFormat when the file
// holds a store of an unknown format version.
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case o.Timeout == 0:
		o.Timeout = DefaultTimeout
	case o.Timeout < 0:
		o.Timeout = time.Nanosecond // bbolt: one attempt; zero would wait forever
	}
	h, err := opened.Open(dir)
	if err != nil {
		return nil, err
	}
	var db *bbolt.DB
	err = guard(filepath.Join(dir, FileName), "open", func() (err error) {
		db, err = bbolt.Open(filepath.Join(dir, FileName), 0o600, &bbolt.Options{
			Timeout:      o.Timeout,
			NoSync:       o.NoSync,
			FreelistType: bbolt.FreelistMapType,
		})
		return err
	})
	if err != nil {
		if db != nil {
			db.Close()
		}
		h.Release()
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, opened.Locked(dir, "another process", err)
		}
		if errors.Is(err, backend.ErrCorrupt) {
			return nil, err
		}
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("sluice/backend/bolt: open %q: cannot open or create %s (is the directory writable?): %w", dir, FileName, err)
		}
		return nil, fmt.Errorf("sluice/backend/bolt: open %q: %w", dir, err)
	}
	if err := guard(filepath.Join(dir, FileName), "open", func() error { return checkFormat(db, dir) }); err != nil {
		guard(filepath.Join(dir, FileName), "close", db.Close)
		h.Release()
		return nil, err
	}
	s := &Store{
		db:     db,
		dir:    dir,
		hold:   h,
		noSync: o.NoSync,
		gate:   gate.New(),
	}
	s.sweeper = walk.NewSweeper(o.SweepBatch, o.Now, s.sweepRead, s.sweepDelete)
	s.sweeper.Start(s.gate, o.SweepInterval)
	return s, nil
}

// checkFormat initialises an empty file with FormatVersion and refuses one
// of another version.
func checkFormat(db *bbolt.DB, dir string) error {
	version := strconv.Itoa(FormatVersion)
	var found []byte
	var foreign, complete bool
	err := db.View(func(tx *bbolt.Tx) error {
		complete = tx.Bucket(recordsBucket) != nil
		if meta := tx.Bucket(metaBucket); meta != nil {
			found = append([]byte{}, meta.Get(formatKey)...)
			return nil
		}
		k, _ := tx.Cursor().First()
		foreign = k != nil
		return nil
	})
	if err != nil {
		return fmt.Errorf("sluice/backend/bolt: open %q: reading the format version: %w", dir, err)
	}
	// Open writes the version and the records bucket in one transaction:
	// a file with one and not the other, or a version that is not a
	// number, has lost part of its tree, and is damaged, not foreign.
	_, numErr := strconv.Atoi(string(found))
	switch {
	case foreign && complete:
		return fmt.Errorf("%w: %w", ErrFormat, damaged(filepath.Join(dir, FileName), "open", fmt.Sprintf("it holds the %q bucket but no format version", recordsBucket)))
	case foreign:
		return fmt.Errorf("%w: %q holds a bbolt file without a Sluice format version; not a Sluice store?", ErrFormat, dir)
	case found != nil && numErr != nil:
		return fmt.Errorf("%w: %w", ErrFormat, damaged(filepath.Join(dir, FileName), "open", fmt.Sprintf("its format version %q is not a number", found)))
	case found != nil && string(found) != version:
		return fmt.Errorf("%w: %q holds format version %q; this release reads version %d only (a newer release wrote it?)",
			ErrFormat, dir, found, FormatVersion)
	case found != nil && !complete:
		return fmt.Errorf("%w: %w", ErrFormat, damaged(filepath.Join(dir, FileName), "open", fmt.Sprintf("it has format version %q but no %q bucket", found, recordsBucket)))
	case found != nil:
		return nil
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucket(metaBucket)
		if err != nil {
			return err
		}
		if err := meta.Put(formatKey, []byte(version)); err != nil {
			return err
		}
		_, err = tx.CreateBucket(recordsBucket)
		return err
	})
	if err == nil && db.NoSync {
		err = db.Sync()
	}
	if err != nil {
		return fmt.Errorf("sluice/backend/bolt: open %q: writing the format version: %w", dir, err)
	}
	return nil
}

// Get returns a copy of the record under key, or nil and no error when there
// is none, it has expired at now, or its stored value is corrupt.
func (s *Store) Get(key []byte, now int64) ([]byte, error) {
	v, _, err := s.Load(key, now)
	return v, err
}

// Load is Get that also returns the record's expiry (backend.Durable).
func (s *Store) Load(key []byte, now int64) ([]byte, int64, error) {
	if len(key) == 0 {
		return nil, 0, backend.ErrEmptyKey
	}
	if err := s.gate.Enter(); err != nil {
		return nil, 0, err
	}
	defer s.gate.Leave()
	var out []byte
	var exp int64
	err := s.view("get", func(tx *bbolt.Tx) error {
		b, err := records(tx)
		if err != nil {
			return err
		}
		v := b.Get(key)
		if err := oversize(tx.Size(), key, v); err != nil {
			return err
		}
		out, exp = frame.Live(v, now)
		return nil
	})
	if err != nil {
		return nil, 0, s.wrap("get", err)
	}
	return out, exp, nil
}

// update runs fn on the records bucket in one read-write transaction.
func (s *Store) update(fn func(b *bbolt.Bucket) error) error {
	if err := s.gate.Enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	return s.updateTx("write", func(tx *bbolt.Tx) error {
		b, err := records(tx)
		if err != nil {
			return err
		}
		return fn(b)
	})
}

// Put stores value under key until expiresAt (Unix nanoseconds; zero or less
// means never), replacing any record there, in one transaction: synced
// unless Options.NoSync is set.
func (s *Store) Put(key, value []byte, expiresAt int64) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	v := frame.Append(make([]byte, 0, frame.HeaderLen+len(value)), value, expiresAt)
	if err := s.update(func(b *bbolt.Bucket) error { return b.Put(key, v) }); err != nil {
		if errors.Is(err, backend.ErrClosed) {
			return err
		}
		return s.wrap("put", err)
	}
	return nil
}

// Delete removes the record under key, in one transaction like Put; a
// missing key is not an error.
func (s *Store) Delete(key []byte) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	if err := s.update(func(b *bbolt.Bucket) error { return b.Delete(key) }); err != nil {
		if errors.Is(err, backend.ErrClosed) {
			return err
		}
		return s.wrap("delete", err)
	}
	return nil
}

// WriteBatch applies writes atomically and in order (a later write to a key
// wins) in one bbolt transaction. Without Options.NoSync the commit is
// always synced; with it, the file is synced after the commit when sync is
// set. A write with an empty key fails the whole batch with
// backend.ErrEmptyKey before anything is written; any other error rolls the
// whole transaction back. An empty batch commits nothing; with sync set and
// Options.NoSync it syncs every earlier commit.
func (s *Store) WriteBatch(writes []backend.Write, sync bool) error {
	size := 0
	for i := range writes {
		if len(writes[i].Key) == 0 {
			return fmt.Errorf("sluice/backend/bolt: write batch: write %d: %w", i, backend.ErrEmptyKey)
		}
		if !writes[i].Delete {
			size += frame.HeaderLen + len(writes[i].Value)
		}
	}
	if len(writes) == 0 {
		// Nothing to commit. With NoSync, a synced empty batch is a
		// barrier that syncs every earlier commit; without, they are all
		// synced already.
		if sync && s.noSync {
			return s.syncFile()
		}
		if err := s.gate.Enter(); err != nil {
			return err
		}
		s.gate.Leave()
		return nil
	}
	// Writes go to the tree in key order, so that one transaction walks
	// each page it dirties once, in order, instead of seeking from the
	// root into pages all over the file; the sort is stable, and of the
	// writes to one key only the last, the one that wins, is made.
	order := make([]int32, len(writes))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return bytes.Compare(writes[a].Key, writes[b].Key) })
	// bbolt keeps the values it is given until the commit: encode them all
	// into one buffer first.
	buf := make([]byte, 0, size)
	err := s.update(func(b *bbolt.Bucket) error {
		for j, i := range order {
			if j+1 < len(order) && bytes.Equal(writes[order[j+1]].Key, writes[i].Key) {
				continue // a later write to the key wins
			}
			w := &writes[i]
			if w.Delete {
				if err := b.Delete(w.Key); err != nil {
					return fmt.Errorf("write %d: %w", i, err)
				}
				continue
			}
			off := len(buf)
			buf = frame.Append(buf, w.Value, w.ExpiresAt)
			if err := b.Put(w.Key, buf[off:len(buf):len(buf)]); err != nil {
				return fmt.Errorf("write %d: %w", i, err)
			}
		}
		return nil
	})
	if err == nil && sync && s.noSync {
		err = s.syncFile()
	}
	if err != nil {
		if errors.Is(err, backend.ErrClosed) {
			return err
		}
		return s.wrap("write batch", err)
	}
	return nil
}

// syncFile calls fdatasync on the file.
func (s *Store) syncFile() error {
	if err := s.gate.Enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	if err := guard(s.file(), "sync", s.db.Sync); err != nil {
		return s.wrap("sync", err)
	}
	return nil
}

// Range calls fn for every record whose key is >= start, in key order,
// including expired records not yet swept, until fn returns false. A
// corrupt record is reported with ExpiresAt 0 and its raw stored bytes as
// Value. The slices passed to fn are valid only during the call.
//
// Range copies the records out of short read transactions and calls fn
// between them, so fn may call the Store and a long Range does not keep
// bbolt from reusing freed pages. It does not see one snapshot: a record
// written during Range may or may not be listed.
func (s *Store) Range(start []byte, fn func(r backend.Record) bool) error {
	return walk.Range(start, s.rangeChunk, fn)
}

// rangeChunk copies out up to rangeChunk records from key from on. next is
// the key to continue from, nil at the end.
func (s *Store) rangeChunk(from []byte) (recs []backend.Record, next []byte, err error) {
	if err := s.gate.Enter(); err != nil {
		return nil, nil, err
	}
	defer s.gate.Leave()
	err = s.view("range", func(tx *bbolt.Tx) error {
		b, err := records(tx)
		if err != nil {
			return err
		}
		c := orderedCursor{c: b.Cursor(), size: tx.Size()}
		k, v, err := c.seek(from)
		for ; err == nil && k != nil && len(recs) < rangeChunk; k, v, err = c.next() {
			if v == nil {
				continue // a nested bucket: not a record
			}
			recs = append(recs, frame.Record(k, v))
		}
		if k != nil {
			next = append([]byte(nil), k...)
		}
		return err
	})
	if err != nil {
		return nil, nil, s.wrap("range", err)
	}
	return recs, next, nil
}

// Close stops the sweeper, waits for the calls in progress and closes the
// file, releasing its lock. Later calls return backend.ErrClosed; a second
// Close returns nil.
func (s *Store) Close() error {
	if !s.gate.Close() {
		return nil
	}
	err := guard(s.file(), "close", s.db.Close)
	s.hold.Release()
	if err != nil {
		return fmt.Errorf("sluice/backend/bolt: close %q: %w", s.dir, err)
	}
	return nil
}
