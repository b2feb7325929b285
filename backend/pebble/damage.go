package pebble

import (
	"errors"
	"fmt"
	"log"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/internal/nospace"
)

// Damage in Pebble's files reaches the store three ways: an error marked
// pebble.ErrCorruption (a block whose checksum does not match, a table
// that does not decode), a panic of code that trusted what it read, and
// the logger's Fatalf, by which Pebble gives up on a database it can no
// longer keep consistent and which its default logger answers by ending
// the process. The store turns each into an error wrapping
// backend.ErrCorrupt: catch does it for the store's calls, and the logger
// for Fatalf, after which the database is not used again (its state is
// past repair) and every call fails at once with the same error.

// pebbleLog is the store's Pebble logger: informational messages are
// dropped, errors go to the standard logger, and Fatalf poisons the store
// instead of ending the process.
type pebbleLog struct {
	dir   string
	fatal atomic.Pointer[string]     // Fatalf's (or the first DataCorruption's) message
	stuck atomic.Pointer[stuckWrite] // Fatalf's on a failed write (stuck.go), until a reopen
	ended atomic.Bool                // Fatalf ended one of Pebble's goroutines
	// flushFull is set while Pebble's flushes of its memtables fail on a
	// full disk (stuck.go), and cleared by the next flush that does not.
	flushFull atomic.Pointer[stuckWrite]
}

// closable reports whether the database may still be closed: no goroutine
// of Pebble's was ended in the middle of its work, which closing it would
// wait for.
func (l *pebbleLog) closable() bool { return !l.ended.Load() }

// backgroundError is Pebble's BackgroundError event (a failed compaction
// or flush): logged as Pebble's default does, but not once the store knows
// it is damaged, for which it has said once what is damaged and which
// Pebble's retries would repeat.
func (l *pebbleLog) backgroundError(err error) {
	if nospace.Is(err) && l.flushFull.Load() != nil {
		return // said when the flushes started to fail; Pebble retries at once
	}
	if l.fatal.Load() == nil {
		l.Errorf("background error: %s", err)
	}
}

// Infof implements pebble.Logger.
func (*pebbleLog) Infof(string, ...any) {}

// Errorf implements pebble.Logger.
func (*pebbleLog) Errorf(format string, args ...any) { pebbledb.DefaultLogger.Errorf(format, args...) }

// Fatalf implements pebble.Logger. Called in a store method, it panics,
// and the method's catch returns the error; called in one of Pebble's
// own goroutines (a compaction, a flush), it ends that goroutine alone.
func (l *pebbleLog) Fatalf(format string, args ...any) {
	// Pebble passes an error with its stack ("%+v"): the first line says
	// what is damaged.
	msg, _, _ := strings.Cut(fmt.Sprintf(format, args...), "\n")
	if failed, full := writeFailure(format, args); failed {
		// A write that failed, the disk full above all: the store is
		// stuck, not damaged (stuck.go).
		l.stuck.CompareAndSwap(nil, &stuckWrite{msg: msg, full: full})
		if inStoreCall() {
			panic(stuckPanic(msg))
		}
		l.ended.Store(true)
		runtime.Goexit()
	}
	if l.fatal.CompareAndSwap(nil, &msg) {
		log.Printf("sluice/backend/pebble: %s: Pebble stopped on damage it cannot repair: %s; every call of the store now fails (on_store_error decides); move the directory away to start afresh", l.dir, msg)
	}
	if inStoreCall() {
		panic(fatalPanic(msg))
	}
	l.ended.Store(true)
	runtime.Goexit()
}

// corruption is Pebble's DataCorruption event: a block whose checksum
// does not match, met by a read of the store's or one of Pebble's own (a
// compaction's). Pebble's default handler calls Fatalf; this one poisons
// the store as Fatalf does and returns, so that the read that met the
// damage fails with its error, in a store call as in a compaction. (Ending
// a compaction's goroutine with runtime.Goexit, as Fatalf does, runs
// Pebble's deferred releases with its buffers in use, and they panic.)
func (l *pebbleLog) corruption(info pebbledb.DataCorruptionInfo) {
	// Its details are an error with its stack: the first line says what
	// is damaged.
	msg, _, _ := strings.Cut(info.String(), "\n")
	if l.fatal.CompareAndSwap(nil, &msg) {
		log.Printf("sluice/backend/pebble: %s: Pebble met damage: %s; every call of the store now fails (on_store_error decides); move the directory away to start afresh", l.dir, msg)
	}
}

// fatalPanic is the panic of Fatalf within a store call.
type fatalPanic string

// storeFrame starts the name of every method of Store.
const storeFrame = "github.com/sluice-go/sluice/backend/pebble.(*Store)."

// inStoreCall reports whether the calling goroutine is inside a method of
// Store, whose catch recovers a panic.
func inStoreCall() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, storeFrame) {
			return true
		}
		if !more {
			return false
		}
	}
}

// damaged is the error of op meeting damage in the store in dir.
func damaged(dir, op, what string) error {
	return fmt.Errorf("sluice/backend/pebble: %s: the store in %s is damaged (%s); move the directory away to start afresh: %w", op, dir, what, backend.ErrCorrupt)
}

// isDamage reports an error of Pebble's that says its files are damaged.
func isDamage(err error) bool {
	if err == nil || errors.Is(err, backend.ErrCorrupt) {
		return false
	}
	if errors.Is(err, pebbledb.ErrCorruption) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"checksum mismatch", "malformed manifest", "error when replaying WAL", "invalid key=value syntax", "corrupt", "invalid table", "bad magic number", "comparer name from file", "merger name from file"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// poisoned returns the error of every call once Fatalf has been called.
func (s *Store) poisoned(op string) error {
	if msg := s.log.fatal.Load(); msg != nil {
		return damaged(s.dir, op, *msg)
	}
	return nil
}

// catch, deferred by a store method with debug.SetPanicOnFault(true) as
// fault, turns a panic, a memory fault or an error of Pebble's that says
// the files are damaged into an error wrapping backend.ErrCorrupt in
// *err, and restores the goroutine's fault setting.
func (s *Store) catch(op string, err *error, fault bool) {
	debug.SetPanicOnFault(fault)
	if r := recover(); r != nil {
		if msg, ok := r.(stuckPanic); ok {
			if *err = s.stuck(op); *err == nil {
				*err = s.stuckError(op, &stuckWrite{msg: string(msg)})
			}
			return
		}
		what := fmt.Sprint(r)
		if msg, ok := r.(fatalPanic); ok {
			what = string(msg)
		}
		*err = damaged(s.dir, op, what)
		return
	}
	switch {
	case isDamage(*err):
		*err = damaged(s.dir, op, (*err).Error())
	case nospace.Is(*err) && !errors.Is(*err, backend.ErrNoSpace):
		*err = nospace.Wrap("sluice/backend/pebble", op, s.dir, *err)
	}
}
