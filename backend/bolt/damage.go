package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/internal/nospace"
)

// bbolt reads its file through a memory map and trusts what it finds: a
// damaged page makes it panic (an assertion, an index out of range, a nil
// bucket) or read outside the map, which is a fault, not a panic. Every
// call into bbolt goes through guard, which turns either into an error
// wrapping backend.ErrCorrupt, so that a damaged file fails the call that
// met the damage, and the gateway's on_store_error decides it, instead of
// killing the process. Reads that do not meet the damaged pages go on
// working; writes stop at the first that meets damage (updateTx).

// guard runs fn, a call into bbolt for op, returning its error, or one
// wrapping backend.ErrCorrupt when it panicked or faulted.
func guard(path, op string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = damaged(path, op, fmt.Sprint(r))
		}
	}()
	err = fn()
	if isDamage(err) {
		err = damaged(path, op, err.Error())
	}
	return err
}

// damaged is the error of op meeting damage in the file at path.
func damaged(path, op, what string) error {
	return fmt.Errorf("sluice/backend/bolt: %s: %s is damaged (%s); move the directory away to start afresh: %w", op, path, what, backend.ErrCorrupt)
}

// wrap adds the package and op to err, but to an error that names them
// already (damage met); a write that failed because the disk is full
// (bbolt's write or sync of the file, or its growing of it) is said so,
// with the file's path, and wraps backend.ErrNoSpace. bbolt rolls such a
// transaction back and takes the next one as before, so the store goes on
// as soon as there is room.
func (s *Store) wrap(op string, err error) error {
	if errors.Is(err, backend.ErrCorrupt) {
		return err
	}
	if nospace.Is(err) {
		return nospace.Wrap("sluice/backend/bolt", op, s.file(), err)
	}
	return fmt.Errorf("sluice/backend/bolt: %s: %w", op, err)
}

// isDamage reports a bbolt error that says the file does not hold a valid
// database.
func isDamage(err error) bool {
	return errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) ||
		errors.Is(err, bolterrors.ErrVersionMismatch) || errors.Is(err, bolterrors.ErrInvalidMapping)
}

// file is the path of the store's bbolt file.
func (s *Store) file() string { return filepath.Join(s.dir, FileName) }

// view runs fn in a read-only transaction, guarded.
func (s *Store) view(op string, fn func(tx *bbolt.Tx) error) error {
	return guard(s.file(), op, func() error { return s.db.View(fn) })
}

// updateTx runs fn in a read-write transaction, guarded. Once one has met
// damage, every later one returns that damage at once without touching
// the file: bbolt writes back the whole page of a key it changes, so a
// damaged page would fail every flush again, and at a cost (a leaf whose
// element claims hundreds of megabytes had bbolt allocate that much at
// each commit, twenty times a second, until the gateway stalled); and
// pages handed out by a damaged tree's freelist may hold records in use.
// Reads go on for the records the damage spared.
func (s *Store) updateTx(op string, fn func(tx *bbolt.Tx) error) error {
	if err := s.broken.Load(); err != nil {
		return *err
	}
	err := guard(s.file(), op, func() error { return s.db.Update(fn) })
	if errors.Is(err, backend.ErrCorrupt) {
		s.broken.CompareAndSwap(nil, &err)
	}
	return err
}

// oversize returns the damage of a key and value longer together than
// the file was (size, a transaction's tx.Size()): a damaged element's
// lengths, which bbolt hands out as slices over memory past the file, and
// copying them (a Load, a Range, a sweep's keys) would allocate as much,
// hundreds of megabytes a call.
func oversize(size int64, k, v []byte) error {
	if n := int64(len(k)) + int64(len(v)); n > size {
		return fmt.Errorf("a record of %d bytes in a file of %d: %w", n, size, bolterrors.ErrInvalid)
	}
	return nil
}

// records returns the records bucket of tx, or an error when the file's
// tree has lost it.
func records(tx *bbolt.Tx) (*bbolt.Bucket, error) {
	b := tx.Bucket(recordsBucket)
	if b == nil {
		return nil, fmt.Errorf("the %q bucket is missing: %w", recordsBucket, bolterrors.ErrInvalid)
	}
	return b, nil
}

// errDisorder is the error of a walk of the records that met a key not
// after the one before it: damaged branch pages send the cursor back, and
// a walk that went on from there (Range, the sweeper) would never end.
var errDisorder = fmt.Errorf("the records' keys are out of order: %w", bolterrors.ErrInvalid)

// orderedCursor walks the records bucket's cursor from a key on, and
// refuses a key not after the one before it (nor at or after from) as
// errDisorder, and a record longer than the file (oversize): every walk
// of the records goes through it, so that none loops on damaged pages or
// copies what a damaged length claims.
type orderedCursor struct {
	c          *bbolt.Cursor
	size       int64 // the file's size at the walk's transaction
	from, prev []byte
}

// seek moves to the first key at or after from (nil: the first key).
func (o *orderedCursor) seek(from []byte) (k, v []byte, err error) {
	o.from, o.prev = from, nil
	if from == nil {
		k, v = o.c.First()
	} else {
		k, v = o.c.Seek(from)
	}
	return o.check(k, v)
}

// next moves to the key after the one last returned.
func (o *orderedCursor) next() (k, v []byte, err error) { return o.check(o.c.Next()) }

func (o *orderedCursor) check(k, v []byte) ([]byte, []byte, error) {
	if k == nil {
		return nil, nil, nil
	}
	if err := oversize(o.size, k, v); err != nil {
		return nil, nil, err
	}
	if o.prev != nil && bytes.Compare(k, o.prev) <= 0 || o.prev == nil && bytes.Compare(k, o.from) < 0 {
		return nil, nil, errDisorder
	}
	o.prev = k
	return k, v, nil
}
