package pebble

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/internal/nospace"
)

// A write Pebble cannot make reaches its logger's Fatalf too: a commit
// whose write-ahead log write or sync failed ("pebble: fatal commit
// error"), when the disk is full above all. That is not damage, and it
// does not end the process; but Pebble's log writer keeps the error for
// every later commit, so the database takes no write again. The store
// then holds it stuck: reads go on from it (its memtable and tables are
// whole), every write fails at once with an error saying why, and the
// next write after reopenEvery closes the database and opens it again,
// once the disk has room for what the reopening writes (the log's records
// replayed into a table, a new log, a new options file): that replays
// every commit that reached the log, and the store takes writes again. A
// commit whose log write failed returned an error to its caller, which
// keeps what it wrote (the engine's tier keeps such records dirty) and
// writes it again.

// A full disk also reaches Pebble's flushes of its memtables to tables,
// which fail in the background while commits go on into log space Pebble
// set aside (it reuses the files of logs already flushed). Pebble retries
// the flush, and once the memtables it holds reach their limit it stalls
// every commit, with no error, until a flush succeeds: a write would then
// wait for as long as the disk is full, and its caller never learn why.
// So from the first flush that fails on a full disk until one succeeds,
// every write fails at once with the full-disk error instead of entering
// Pebble; the database needs no reopen, since Pebble's own retry ends the
// episode.

// reopenEvery is the least time between two attempts to reopen a stuck
// database.
const reopenEvery = 500 * time.Millisecond

// reopenRoom is the room, beyond the size of the write-ahead logs, that
// the file system must have before a stuck database is reopened: a reopen
// that found no room to flush the logs it replayed would leave the log
// torn by the failed write behind a newer one, which Pebble reads as
// damage at the next open.
const reopenRoom = 256 << 10

// stuckWrite is why the database takes no write.
type stuckWrite struct {
	msg  string // Pebble's message, its first line
	full bool   // the disk is full
}

// stuckPanic is the panic of Fatalf on a write failure within a store call.
type stuckPanic string

// writeFailure reports whether Fatalf's message and arguments say that a
// write failed, rather than that the files are damaged, and whether it
// failed because the disk is full.
func writeFailure(format string, args []any) (failed, full bool) {
	for _, a := range args {
		if err, ok := a.(error); ok && nospace.Is(err) {
			return true, true
		}
	}
	msg := fmt.Sprintf(format, args...)
	if nospace.Is(errors.New(msg)) {
		return true, true
	}
	return strings.HasPrefix(format, "pebble: fatal commit error") || strings.HasPrefix(msg, "MANIFEST "), false
}

// stuck returns the error of op while the database takes no write, or nil.
func (s *Store) stuck(op string) error {
	w := s.log.stuck.Load()
	if w == nil {
		return nil
	}
	return s.stuckError(op, w)
}

func (s *Store) stuckError(op string, w *stuckWrite) error {
	then := "the store reopens the database at a write once there is room"
	if !s.log.closable() {
		then = "the process restarts: Pebble stopped one of its own goroutines on it"
	}
	if w.full {
		return fmt.Errorf("sluice/backend/pebble: %s: %s: the disk is full (%s); writes fail until %s: %w",
			op, s.dir, w.msg, then, backend.ErrNoSpace)
	}
	return fmt.Errorf("sluice/backend/pebble: %s: %s: Pebble could not write (%s); writes fail until %s",
		op, s.dir, w.msg, then)
}

// enter admits a call to the database: it fails with the gate's error once
// the store is closed, and with the stuck error while a reopen of the
// database has not succeeded. The caller must call s.gate.Leave when enter
// returns nil.
func (s *Store) enter(op string) error {
	if err := s.gate.Enter(); err != nil {
		return err
	}
	if s.db == nil {
		s.gate.Leave()
		if err := s.stuck(op); err != nil {
			return err
		}
		return fmt.Errorf("sluice/backend/pebble: %s: %s: the database is not open", op, s.dir)
	}
	return nil
}

// flushEnd is Pebble's FlushEnd event: a flush that failed on a full disk
// makes every write fail at once (see above), and one that did not lets
// them through again.
func (l *pebbleLog) flushEnd(info pebbledb.FlushInfo) {
	if info.Err != nil && nospace.Is(info.Err) {
		if l.flushFull.Load() == nil {
			msg, _, _ := strings.Cut(info.Err.Error(), "\n")
			if l.flushFull.CompareAndSwap(nil, &stuckWrite{msg: "flushing the memtable: " + msg, full: true}) {
				l.Errorf("background error: %s", info.Err)
			}
		}
		return
	}
	l.flushFull.Store(nil)
}

// flushError returns the error of op while Pebble's flushes fail on a full
// disk, or nil.
func (s *Store) flushError(op string) error {
	w := s.log.flushFull.Load()
	if w == nil {
		return nil
	}
	return fmt.Errorf("sluice/backend/pebble: %s: %s: the disk is full (%s); writes fail until Pebble, which retries, flushes its memtable: %w",
		op, s.dir, w.msg, backend.ErrNoSpace)
}

// unstick is called by every write before it enters: while the database is
// stuck, it reopens it when the last attempt is reopenEvery old and the
// disk has room, and returns nil once the database takes writes again, or
// op's stuck error.
func (s *Store) unstick(op string) error {
	if err := s.flushError(op); err != nil {
		return err
	}
	if s.log.stuck.Load() == nil {
		return nil
	}
	s.reopenMu.Lock()
	defer s.reopenMu.Unlock()
	w := s.log.stuck.Load()
	if w == nil {
		return nil // another write reopened it
	}
	if !s.log.closable() || time.Since(s.lastReopen) < reopenEvery {
		return s.stuckError(op, w)
	}
	s.lastReopen = time.Now()
	if !s.room() {
		return s.stuckError(op, w)
	}
	var err error
	if herr := s.gate.Hold(func() { err = s.reopen(w) }); herr != nil {
		return herr
	}
	if err != nil {
		return fmt.Errorf("%w (reopening: %v)", s.stuckError(op, s.log.stuck.Load()), err)
	}
	return nil
}

// room reports whether the file system holding the store has room to
// reopen it (see reopenRoom), or cannot tell.
func (s *Store) room() bool {
	free, ok := nospace.Free(s.dir)
	if !ok {
		return true
	}
	logs, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
	need := int64(reopenRoom)
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil {
			need += fi.Size()
		}
	}
	return free >= need
}

// reopen closes the database, stuck on w, and opens it again; it runs with
// the gate held, so no call uses the database meanwhile. On failure the
// database is left closed (s.db nil) and the store stuck: every call fails
// with the stuck error until a later reopen succeeds.
func (s *Store) reopen(w *stuckWrite) error {
	if s.db != nil {
		// Close reports the log's write error; the database is closed
		// all the same.
		s.closeDB()
		s.db = nil
	}
	s.log.stuck.Store(nil)
	err := s.open(s.popts)
	if err == nil {
		if w2 := s.log.stuck.Load(); w2 != nil {
			// Opening wrote, and a write failed without an error
			// returned.
			s.closeDB()
			s.db = nil
			err = errors.New(w2.msg)
		}
	}
	if err != nil {
		s.log.stuck.CompareAndSwap(nil, w)
	}
	return err
}
