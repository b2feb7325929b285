package engine

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/table"
)

// The engine's dispatch. New looks at the backend once and picks its path
// by the one path interface it implements (see package backend), and the
// counts and sweeps it reads:
//
//   - the striped path, for every store that can lend a lock: a
//     backend.Striped (the memory store, or any store wrapping one), the
//     in-memory tier over a backend.Durable (Pebble, bbolt), or a plain
//     Backend made striped by the engine's own locks (lockedBackend). A
//     decision takes one stripe lock and reads, steps and writes under it.
//   - the swap path, for a backend.Swapper: see swap.go.
//
// On the striped path a bare memory store is called without an interface,
// through the table.Table it is built on (tableStore), so that a key built
// on the caller's stack stays there: the same calls, in the same order, as
// through backend.Striped, only devirtualised.

// storeSet is what New chose for a backend.
type storeSet struct {
	striped backend.Striped // the striped path's store; nil on the swap path
	table   *table.Table    // the table striped is, when it is a bare memory store
	tier    *tier           // striped, when it is the tier over a durable store
	swap    *swapPath       // the swap path; nil on the striped path
	count   backend.Stats   // what Stats.Keys and Stats.Evictions read; nil when unknown
	sweeper backend.Sweeper // what Sweep calls; nil when the store cannot sweep
	// readsCtx is set on the striped path over a store that is not
	// Striped (the tier over a Durable store, a plain Backend): a call
	// checks its context before it spends. A Striped store's calls never
	// read it; the swap path reads it itself.
	readsCtx bool
}

// choose picks the engine's path over b. n is the stripe count asked for
// (zero: the default); it returns the stripe count used.
func (e *Engine) choose(b backend.Backend, o *Options, n int) (int, error) {
	if err := onePath(b); err != nil {
		return 0, err
	}
	s := &e.store
	switch sb := b.(type) {
	case backend.Swapper:
		if n == 0 {
			n = DefaultStripes
		}
		sp, err := newSwapPath(sb, &o.Swap, n)
		if err != nil {
			return 0, err
		}
		s.swap = sp
	case backend.Durable:
		t, err := newTier(sb, o, e.clock, e.log)
		if err != nil {
			return 0, err
		}
		s.tier, s.striped, n = t, t, t.Stripes()
		s.count, s.sweeper = t.cache, t.cache
		s.readsCtx = true
		return n, nil
	case backend.Striped:
		s.striped, n = sb, sb.Stripes()
		if ts, ok := b.(tableStore); ok {
			s.table = ts.Table()
		}
		s.count, s.sweeper = sb, sb
		return n, nil
	default:
		if n == 0 {
			n = DefaultStripes
		}
		s.striped = newLockedBackend(b, n)
		s.readsCtx = true
	}
	s.count, _ = b.(backend.Stats)
	s.sweeper, _ = b.(backend.Sweeper)
	return n, nil
}

// tableStore is a store built on a table.Table, which it lends the engine
// for its devirtualised calls: the memory store. (A store wrapping one,
// such as faulty's, is not one: it is called through backend.Striped.)
type tableStore interface {
	backend.Striped
	Table() *table.Table
}

// onePath returns an error when b implements more than one of the path
// interfaces: which path such a store means cannot be told.
func onePath(b backend.Backend) error {
	var paths []string
	if _, ok := b.(backend.Striped); ok {
		paths = append(paths, "backend.Striped")
	}
	if _, ok := b.(backend.Durable); ok {
		paths = append(paths, "backend.Durable")
	}
	if _, ok := b.(backend.Swapper); ok {
		paths = append(paths, "backend.Swapper")
	}
	if len(paths) > 1 {
		return errorf("%T implements %s: a store takes one path", b, strings.Join(paths, " and "))
	}
	return nil
}

func (e *Engine) lock(i int) {
	if e.store.table != nil {
		e.store.table.Lock(i)
		return
	}
	e.store.striped.Lock(i)
}

func (e *Engine) unlock(i int) {
	if e.store.table != nil {
		e.store.table.Unlock(i)
		return
	}
	e.store.striped.Unlock(i)
}

// get, write and del are the striped path's record operations, for a caller
// holding the stripe of st. A bare memory store's table gets k itself; any other
// store, called through an interface that would make k escape to the heap,
// gets the stripe's copy of it, so that a caller's key on the stack stays
// there.
func (e *Engine) get(st *stripe, h uint64, k []byte, now int64) ([]byte, error) {
	if e.store.table != nil {
		return e.store.table.GetLocked(h, k, now)
	}
	st.key = append(st.key[:0], k...)
	return e.store.striped.GetLocked(h, st.key, now)
}

// write stores next under k until now+ttl, or removes the record when there
// is no next record (a corrupt one being dropped) or it is already
// equivalent to none.
func (e *Engine) write(st *stripe, h uint64, k, next []byte, now int64, ttl time.Duration) error {
	if next == nil || ttl <= 0 {
		return e.del(st, h, k)
	}
	if e.store.table != nil {
		return e.store.table.PutLocked(h, k, next, now+int64(ttl))
	}
	st.key = append(st.key[:0], k...)
	return e.store.striped.PutLocked(h, st.key, next, now+int64(ttl))
}

// keep lengthens the expiry of k's record to now+ttl when the record would
// expire sooner (see backend.Striped.ExtendLocked), and reports whether it
// did. It is called after a denial, which writes nothing; it is best
// effort: a store that cannot (a plain Backend under the engine's locks),
// or fails to, forgets the record at its old expiry.
func (e *Engine) keep(st *stripe, h uint64, k []byte, now int64, ttl time.Duration) bool {
	if ttl <= 0 {
		return false
	}
	st.key = append(st.key[:0], k...)
	ok, err := e.store.striped.ExtendLocked(h, st.key, now, addSat(now, ttl))
	return ok && err == nil
}

// addSat returns now+d, saturating at the largest time rather than
// wrapping (an algorithm of another package may answer any duration).
func addSat(now int64, d time.Duration) int64 {
	if d > 0 && now > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return now + int64(d)
}

func (e *Engine) del(st *stripe, h uint64, k []byte) error {
	if e.store.table != nil {
		return e.store.table.DeleteLocked(h, k)
	}
	st.key = append(st.key[:0], k...)
	return e.store.striped.DeleteLocked(h, st.key)
}

// lockedBackend makes a plain Backend a backend.Striped with the engine's
// own stripe locks, so every store that can be locked in process takes one
// path. Its *Locked methods are the plain ones: the record Get returns is
// the caller's, so stepping it in place is safe. It cannot lengthen an
// expiry without writing the record, so ExtendLocked does nothing. Its
// count and sweep are the store's, when it has them (the engine reads
// those from the store itself).
type lockedBackend struct {
	backend.Backend
	locks []paddedMutex
}

// paddedMutex keeps neighbouring stripes' locks off one cache line.
type paddedMutex struct {
	mu sync.Mutex // makes read-step-write indivisible for the stripe's keys
	_  [56]byte
}

var _ backend.Striped = (*lockedBackend)(nil)

func newLockedBackend(b backend.Backend, n int) *lockedBackend {
	return &lockedBackend{Backend: b, locks: make([]paddedMutex, n)}
}

func (l *lockedBackend) Stripes() int { return len(l.locks) }
func (l *lockedBackend) Lock(i int)   { l.locks[i].mu.Lock() }
func (l *lockedBackend) Unlock(i int) { l.locks[i].mu.Unlock() }

func (l *lockedBackend) GetLocked(_ uint64, k []byte, now int64) ([]byte, error) {
	return l.Get(k, now)
}

func (l *lockedBackend) PutLocked(_ uint64, k, v []byte, exp int64) error {
	return l.Put(k, v, exp)
}

func (l *lockedBackend) DeleteLocked(_ uint64, k []byte) error { return l.Delete(k) }

func (l *lockedBackend) ExtendLocked(uint64, []byte, int64, int64) (bool, error) {
	return false, nil
}

// Len is the store's, or -1 when it does not count.
func (l *lockedBackend) Len() int {
	if c, ok := l.Backend.(backend.Stats); ok {
		return c.Len()
	}
	return -1
}

// Evictions is the store's, or zero when it does not count.
func (l *lockedBackend) Evictions() uint64 {
	if c, ok := l.Backend.(backend.Stats); ok {
		return c.Evictions()
	}
	return 0
}

// Sweep is the store's, or removes nothing when it does not sweep.
func (l *lockedBackend) Sweep(now int64, budget int) (int, error) {
	if sw, ok := l.Backend.(backend.Sweeper); ok {
		return sw.Sweep(now, budget)
	}
	return 0, nil
}
