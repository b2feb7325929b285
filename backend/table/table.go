package table

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// ErrTooLarge is returned by a write whose key or value is longer than 1 GiB,
// or whose entry would grow a shard's arena past 4 GiB.
var ErrTooLarge = errors.New("sluice/backend/table: record too large")

// Defaults used for the zero value of each Options field.
const (
	// DefaultShards is the fewest shards when Options.Shards is zero: the
	// table then has DefaultShards, or ShardsPerProc per GOMAXPROCS when
	// that is more (see Options.Shards).
	DefaultShards = 256
	// ShardsPerProc is how many shards per GOMAXPROCS a table has by
	// default, so that the chance of a decision finding its shard locked by
	// another core stays the same on 2 cores and on 64.
	ShardsPerProc = 64
	// DefaultSweepInterval is the sweeper's period when
	// Options.SweepInterval is zero.
	DefaultSweepInterval = time.Second
	// DefaultSweepBatch is the most keys examined per shard visit when
	// Options.SweepBatch is zero.
	DefaultSweepBatch = 1024

	// maxShards bounds Options.Shards.
	maxShards = 1 << 16
)

// Options configures a Table. A nil *Options, and the zero value of each
// field, mean the documented default.
type Options struct {
	// Shards is the number of partitions, each with its own lock, index
	// and arena; the engine uses them as its stripes. A value that is not a
	// power of two is rounded up to the next one; values above 65536 are
	// lowered to 65536. Zero or less means 256, or 64 per GOMAXPROCS (as
	// New finds it) where that is more: 4096 on 64 cores. Two decisions
	// contend only when they fall on one shard at once, which happens to
	// about (GOMAXPROCS-1)/Shards of decisions times the share of a
	// decision spent under the lock; shards in proportion to the cores
	// keep that share constant, where a fixed 256 would let 64 busy cores
	// collide on one decision in ten.
	Shards int

	// MaxKeys bounds the number of keys held, expired or not. When the
	// table is full, a Put of a new key returns backend.ErrFull while keys
	// already held can still be updated. Before refusing, the Put sweeps
	// one batch of the key's shard for keys expired as of the latest now a
	// reader passed to that shard. Zero or less means unlimited.
	//
	// The table refuses new keys rather than evicting live ones on
	// purpose: a record is a caller's spent budget, so evicting it would
	// hand that caller a fresh budget. An attacker who could flood the
	// table with new keys would then reset a victim's limit at will.
	// Refusing new keys caps memory and lets the engine answer for an
	// unknown key by policy (fail open or closed) instead.
	MaxKeys int

	// SweepInterval is how often the background sweeper runs. Each run
	// examines every key held, shard by shard, in steps that hold a shard's
	// lock for at most SweepBatch keys, so an expired key is freed within
	// about two intervals however fast new keys arrive. Zero means one second; a
	// negative value disables the sweeper, and expired keys are then
	// removed only by explicit calls to Sweep (they read as absent
	// regardless).
	SweepInterval time.Duration

	// SweepBatch is the largest number of keys examined per shard visit,
	// that is the most work done under one shard lock by a sweep. Zero or
	// less means 1024.
	SweepBatch int

	// Now is the sweeper's clock, in Unix nanoseconds. It is never called
	// under a shard lock. Nil means time.Now().UnixNano().
	Now func() int64
}

// Stats are counters describing a Table, for metrics.
type Stats struct {
	// Keys is the number of keys held, including expired ones not yet
	// swept (the same as Len).
	Keys int
	// Evicted is the total number of expired keys removed by sweeping,
	// whether by the background sweeper, by Sweep or to make room for a
	// new key in a full table.
	Evicted uint64
	// Compactions is the total number of shard arena compactions.
	Compactions uint64
	// SweptAt is the clock reading (Options.Now) at which the last
	// complete background sweep began: every key that had expired by then
	// has been removed. Zero until a background sweep has covered every
	// shard.
	SweptAt int64
}

// Table is the sharded, expiring table of records under the memory store
// and the engine's in-memory tier: a backend.Striped that keeps every
// record in memory, and, for a caller holding a stripe lock, a way to step
// a record where it lies (LookupLocked, Ref, PutRefLocked). All methods
// are safe for concurrent use; the *Locked methods and Ref's additionally
// require the caller to hold the key's stripe lock, as backend.Striped
// documents.
//
// Values returned by Get are copies owned by the caller; Put copies its
// arguments. GetLocked returns a slice aliasing the stored record, valid
// until the stripe lock is released or the stripe is written.
//
// Lock order: sweepMu, then a shard's lock. At most one shard lock is held
// by the Table itself at any time; the engine may hold several, taken in
// stripe order.
type Table struct {
	// Read by every call and written only by New: a line every core keeps
	// a copy of. The padding keeps another object's writes off it, and the
	// counters below, which new keys, sweeps and compactions write, off
	// the line of shards and mask.
	_       [cacheLine]byte
	shards  []shard
	mask    uint64
	maxKeys int64
	batch   int
	now     func() int64
	minDead int           // dead arena bytes below which no shard compacts
	closed  atomic.Bool   // set once by Close
	stop    chan struct{} // closed by Close to stop the sweeper; nil if none
	done    chan struct{} // closed by the sweeper when it returns
	_       [cacheLine]byte

	keys        atomic.Int64  // keys held in all shards, counted only under MaxKeys (see release)
	evicted     atomic.Uint64 // keys removed by sweeping
	compactions atomic.Uint64 // arena compactions
	sweptAt     atomic.Int64  // start of the last complete background sweep

	sweepMu   sync.Mutex // guards sweepNext and serialises sweeps
	sweepNext int        // next shard Sweep visits
}

// cacheLine is the cache line size the layouts assume: 64 bytes on amd64
// and most arm64 cores.
const cacheLine = 64

// New returns an empty Table configured by opts (nil means defaults) and,
// unless opts disables it, starts its background sweeper. Close stops it.
func New(opts *Options) *Table {
	var o Options
	if opts != nil {
		o = *opts
	}
	n := o.Shards
	switch {
	case n <= 0:
		n = max(DefaultShards, 1<<bits.Len(uint(ShardsPerProc*runtime.GOMAXPROCS(0)-1)))
		n = min(n, maxShards)
	case n > maxShards:
		n = maxShards
	default:
		n = 1 << bits.Len(uint(n-1))
	}
	if o.SweepBatch <= 0 {
		o.SweepBatch = DefaultSweepBatch
	}
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixNano() }
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	s := &Table{
		shards:  make([]shard, n),
		mask:    uint64(n - 1),
		maxKeys: int64(max(o.MaxKeys, 0)),
		batch:   o.SweepBatch,
		now:     o.Now,
		minDead: compactMinDead,
	}
	seed := rand.Uint32()
	for i := range s.shards {
		s.shards[i].seed = seed
	}
	if o.SweepInterval > 0 {
		s.stop = make(chan struct{})
		s.done = make(chan struct{})
		go s.sweeper(o.SweepInterval)
	}
	return s
}

// Get returns a copy of the record under key, or nil and no error when there
// is none or it has expired at now.
func (s *Table) Get(key []byte, now int64) ([]byte, error) {
	if len(key) == 0 {
		return nil, backend.ErrEmptyKey
	}
	hash := backend.Hash(key)
	sh := &s.shards[hash&s.mask]
	sh.lock()
	v, err := s.getLocked(sh, hash, key, now)
	if v != nil {
		v = append(make([]byte, 0, len(v)), v...)
	}
	sh.unlock()
	return v, err
}

// Put stores a copy of value under key until expiresAt (Unix nanoseconds;
// zero or less means never), replacing any record there. It returns
// backend.ErrFull when key is new and the table holds MaxKeys keys.
func (s *Table) Put(key, value []byte, expiresAt int64) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	hash := backend.Hash(key)
	sh := &s.shards[hash&s.mask]
	sh.lock()
	err := s.putLocked(sh, hash, key, value, expiresAt)
	sh.unlock()
	return err
}

// Delete removes the record under key; a missing key is not an error.
func (s *Table) Delete(key []byte) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	hash := backend.Hash(key)
	sh := &s.shards[hash&s.mask]
	sh.lock()
	err := s.deleteLocked(sh, hash, key)
	sh.unlock()
	return err
}

// Stripes returns the number of shards, a power of two.
func (s *Table) Stripes() int { return len(s.shards) }

// Lock acquires the lock of shard i, 0 <= i < Stripes().
func (s *Table) Lock(i int) { s.shards[i].lock() }

// Unlock releases the lock of shard i.
func (s *Table) Unlock(i int) { s.shards[i].unlock() }

// GetLocked is Get for a caller holding the lock of shard hash&(Stripes()-1),
// where hash is backend.Hash(key). The returned slice aliases the stored
// record: it may be modified in place and passed back to PutLocked, and must
// not be used after the lock is released or the shard is written. It never
// allocates.
func (s *Table) GetLocked(hash uint64, key []byte, now int64) ([]byte, error) {
	if len(key) == 0 {
		return nil, backend.ErrEmptyKey
	}
	return s.getLocked(&s.shards[hash&s.mask], hash, key, now)
}

// PutLocked is Put for a caller holding the lock of shard
// hash&(Stripes()-1). value may alias the slice GetLocked returned for key
// (for key only: a value aliasing another key's record is not allowed).
// Overwriting a record with one of the same length, or any length that fits
// the space reserved for it without leaving most of it idle, rewrites it in
// place without allocating.
func (s *Table) PutLocked(hash uint64, key, value []byte, expiresAt int64) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	return s.putLocked(&s.shards[hash&s.mask], hash, key, value, expiresAt)
}

// DeleteLocked is Delete for a caller holding the lock of shard
// hash&(Stripes()-1).
func (s *Table) DeleteLocked(hash uint64, key []byte) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	return s.deleteLocked(&s.shards[hash&s.mask], hash, key)
}

// Ref locates a key's entry in the table, for the caller holding the key's
// stripe lock that found it with LookupLocked: the PutRefLocked that follows
// writes the entry without looking the key up again. A Ref is valid only
// until the lock is released or the shard is written by any other call. The
// zero Ref is no entry.
type Ref struct {
	sh          *shard
	off, val, n uint32 // the entry, its value and the value's length
}

// LookupLocked is GetLocked that also returns the key's entry. record is
// the slice GetLocked returns, or, when the key has no record or it has
// expired at now, an empty one whose spare capacity (the shard's own 32
// bytes) a new record may be built in before it is passed to PutRefLocked,
// so that a key's first record costs no allocation. ref locates the entry,
// expired or not, and is zero when the key has none. A caller that steps
// the record in place passes ref to PutRefLocked, which then writes only
// the expiry when the length is unchanged. Like GetLocked it remembers the
// entry it found, so that a hot key is not probed for again; unlike it, it
// takes no note of now (a full table reclaims with the now PutRefLocked is
// given).
func (s *Table) LookupLocked(hash uint64, key []byte, now int64) (record []byte, ref Ref, err error) {
	sh := &s.shards[hash&s.mask]
	if sh.closed {
		return nil, Ref{}, backend.ErrClosed
	}
	fp := uint32(hash >> 32)
	var off, val, n uint32
	if sh.isHot(fp, key) {
		// A hot key looked up again: no probe.
		off, val, n = sh.hotOff, sh.hotVal, sh.hotVlen
	} else {
		slot, o, v, vn, vcap, ok := sh.lookup(fp, key)
		if !ok {
			return sh.scratch[:0], Ref{}, nil
		}
		off, val, n = o, v, vn
		sh.hotGen, sh.hotSlot, sh.hotOff, sh.hotVal = sh.gen, uint32(slot), off, val
		sh.hotVlen, sh.hotVcap, sh.hotFP, sh.hotKlen = n, vcap, fp, uint32(len(key))
	}
	a := sh.arena
	if e := int64(binary.LittleEndian.Uint64(a[off:])); e > 0 && e <= now {
		return sh.scratch[:0], Ref{sh, off, val, n}, nil
	}
	return a[val : val+n : val+n], Ref{sh, off, val, n}, nil
}

// SetExpiryLocked writes expiresAt as the expiry of the entry ref locates
// and reports true when record is that entry's own value, as LookupLocked
// returned it (stepped in place, its length unchanged): what PutRefLocked
// does then, small enough to be inlined in the caller. Otherwise it writes
// nothing and reports false, and the caller calls PutRefLocked.
func (r Ref) SetExpiryLocked(record []byte, expiresAt int64) bool {
	if r.sh == nil || uint32(len(record)) != r.n || len(record) == 0 || &record[0] != &r.sh.arena[r.val] {
		return false
	}
	binary.LittleEndian.PutUint64(r.sh.arena[r.off:], uint64(expiresAt))
	return true
}

// ExtendExpiryLocked is ExtendLocked for the entry ref locates: it sets the
// entry's expiry to expiresAt when the entry is live at now and would
// expire before then, and reports whether it did.
func (r Ref) ExtendExpiryLocked(now, expiresAt int64) bool {
	if r.sh == nil {
		return false
	}
	return r.sh.extend(r.off, now, expiresAt)
}

// ExtendLocked lengthens the expiry of key's record to expiresAt when the
// table holds it, live at now, and it would expire before then; it reports
// whether it did. A record that never expires is left so. It implements
// backend.Striped.
func (s *Table) ExtendLocked(hash uint64, key []byte, now, expiresAt int64) (bool, error) {
	if len(key) == 0 {
		return false, backend.ErrEmptyKey
	}
	sh := &s.shards[hash&s.mask]
	if sh.closed {
		return false, backend.ErrClosed
	}
	_, off, _, _, _, ok := sh.lookup(uint32(hash>>32), key)
	return ok && sh.extend(off, now, expiresAt), nil
}

// PutRefLocked is PutLocked for the entry ref, which LookupLocked returned
// for key in the same hold of the stripe lock (zero when the key had
// none), at now, the time the lookup was made. A value of the length the
// entry holds, the common case, is written in place with its expiry and
// nothing else: not even copied when it is the slice LookupLocked returned,
// stepped in place. A full table (Options.MaxKeys) reclaims room for a new
// key with now.
func (s *Table) PutRefLocked(hash uint64, ref Ref, key, value []byte, now, expiresAt int64) error {
	if sh := ref.sh; sh != nil && uint32(len(value)) == ref.n {
		a := sh.arena
		binary.LittleEndian.PutUint64(a[ref.off:], uint64(expiresAt))
		if len(value) > 0 && &value[0] != &a[ref.val] {
			copy(a[ref.val:ref.val+ref.n], value)
		}
		return nil
	}
	sh := &s.shards[hash&s.mask]
	if s.maxKeys > 0 && now > sh.now {
		sh.now = now
	}
	return s.putLocked(sh, hash, key, value, expiresAt)
}

// Len returns the number of keys held, including expired ones not yet swept.
// It sums the shards' counts, taking no lock: keys added or removed while it
// runs may or may not be counted. Under Options.MaxKeys it reads the one
// count the bound is kept by instead, which a sum torn by concurrent writes
// could exceed: a reader then sees at most MaxKeys, and one more per Put in
// flight (a Put counts a new key before it checks the bound).
func (s *Table) Len() int {
	if s.maxKeys > 0 {
		return int(max(0, s.keys.Load()))
	}
	n := int64(0)
	for i := range s.shards {
		n += s.shards[i].held.Load()
	}
	return int(n)
}

var _ backend.Striped = (*Table)(nil)

// Evictions returns the number of expired keys removed so far, as
// Stats().Evicted. It implements backend.Stats.
func (s *Table) Evictions() uint64 { return s.evicted.Load() }

// Stats returns the table's counters. It takes no lock.
func (s *Table) Stats() Stats {
	return Stats{
		Keys:        s.Len(),
		Evicted:     s.evicted.Load(),
		Compactions: s.compactions.Load(),
		SweptAt:     s.sweptAt.Load(),
	}
}

// Close stops the sweeper, waiting for it to return, and releases every
// shard's memory. Every later call returns backend.ErrClosed (Lock and Unlock
// still work, so that a caller holding a stripe sees ErrClosed from the
// *Locked methods rather than a panic). A second Close returns nil.
func (s *Table) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.lock()
		sh.closed = true
		sh.gen++
		s.release(sh.count)
		sh.slots, sh.arena, sh.count, sh.dead, sh.cursor = nil, nil, 0, 0, 0
		sh.publish()
		sh.held.Store(0)
		sh.unlock()
	}
	return nil
}

func (s *Table) getLocked(sh *shard, hash uint64, key []byte, now int64) ([]byte, error) {
	if sh.closed {
		return nil, backend.ErrClosed
	}
	if s.maxKeys > 0 && now > sh.now {
		sh.now = now // only a full table uses it: don't dirty the line otherwise
	}
	fp := uint32(hash >> 32)
	var off, val, vlen uint32
	if sh.isHot(fp, key) {
		// A hot key read again: no probe.
		off, val, vlen = sh.hotOff, sh.hotVal, sh.hotVlen
	} else {
		slot, o, v, n, vcap, ok := sh.find(fp, key)
		if !ok {
			return nil, nil
		}
		off, val, vlen = o, v, n
		sh.hotGen, sh.hotSlot, sh.hotOff, sh.hotVal = sh.gen, uint32(slot), off, val
		sh.hotVlen, sh.hotVcap, sh.hotFP, sh.hotKlen = vlen, vcap, fp, uint32(len(key))
	}
	if expired(sh.expiresAt(off), now) {
		return nil, nil
	}
	return sh.arena[val : val+vlen : val+vlen], nil
}

func (s *Table) putLocked(sh *shard, hash uint64, key, value []byte, expiresAt int64) error {
	if sh.closed {
		return backend.ErrClosed
	}
	if len(key) > maxLen || len(value) > maxLen {
		return ErrTooLarge
	}
	fp := uint32(hash >> 32)
	var (
		slot                 int
		off, val, vlen, vcap uint32
		ok                   bool
	)
	if sh.isHotWrite(fp, key, value) {
		// Written back right after GetLocked: no probe.
		slot, off, val, vlen, vcap, ok = int(sh.hotSlot), sh.hotOff, sh.hotVal, sh.hotVlen, sh.hotVcap, true
	} else {
		slot, off, val, vlen, vcap, ok = sh.find(fp, key)
	}
	n := uint32(len(value))
	if ok {
		a := sh.arena
		// Rewrite in place when the value fits and does not leave more than
		// half of a sizeable reserve idle (a shrunken record moves, so the
		// compaction that follows returns the space).
		if n <= vcap && (n >= vcap/2 || vcap <= 64) {
			putInt64(a[off:], expiresAt)
			if n != vlen {
				w := uvarintLen(vcap)
				putUvarintWidth(a[val-uint32(len(key))-w:], n, w)
				sh.gen++
			}
			// A record stepped in place through the slice GetLocked
			// returned is already there.
			if n > 0 && &value[0] != &a[val] {
				copy(a[val:val+n], value)
			}
			return nil
		}
		// Relocate with a quarter of headroom so a growing record (a
		// sliding log) moves a logarithmic number of times. value may
		// alias the old entry: appendEntry copies it before anything
		// overwrites those bytes.
		noff, err := sh.appendEntry(key, value, expiresAt, min(n+n/4, maxLen))
		if err != nil {
			return err
		}
		sh.dead += uint32(entrySize(uint32(len(key)), vcap))
		sh.slots[slot] = uint64(fp)<<32 | uint64(noff)
		sh.gen++
		s.tidy(sh)
		return nil
	}

	reserved, moved := s.reserve(sh)
	if !reserved {
		return backend.ErrFull
	}
	if sh.needGrow() {
		sh.grow()
		moved = true
	}
	if moved {
		slot, _, _, _, _, _ = sh.find(fp, key)
	}
	noff, err := sh.appendEntry(key, value, expiresAt, n)
	if err != nil {
		s.release(1)
		return err
	}
	sh.slots[slot] = uint64(fp)<<32 | uint64(noff)
	sh.count++
	sh.held.Store(int64(sh.count))
	sh.gen++
	return nil
}

// reserve counts one more key and reports true, or reports false when the
// table is full. A full table first sweeps a batch of sh with the latest now
// its readers have used (no clock is called under the lock) to reclaim
// expired keys; moved reports that it did, so slot positions have changed.
func (s *Table) reserve(sh *shard) (ok, moved bool) {
	if s.maxKeys == 0 {
		return true, false
	}
	if s.keys.Add(1) <= s.maxKeys {
		return true, false
	}
	s.keys.Add(-1)
	if sh.now == 0 {
		return false, false
	}
	_, removed := sh.sweep(sh.now, s.batch)
	if removed == 0 {
		return false, false
	}
	s.keys.Add(-int64(removed))
	s.evicted.Add(uint64(removed))
	s.tidy(sh)
	if s.keys.Add(1) <= s.maxKeys {
		return true, true
	}
	s.keys.Add(-1)
	return false, true
}

func (s *Table) deleteLocked(sh *shard, hash uint64, key []byte) error {
	if sh.closed {
		return backend.ErrClosed
	}
	slot, _, _, _, _, ok := sh.find(uint32(hash>>32), key)
	if !ok {
		return nil
	}
	sh.removeSlot(slot)
	s.release(1)
	s.tidy(sh)
	return nil
}

// release gives back n keys' places under Options.MaxKeys. Only a bounded
// table keeps the one count of keys that every shard writes; Len sums the
// shards' own.
func (s *Table) release(n int) {
	if s.maxKeys > 0 {
		s.keys.Add(-int64(n))
	}
}

func putInt64(b []byte, v int64) {
	_ = b[7]
	b[0] = byte(v)
	b[1] = byte(v >> 8)
	b[2] = byte(v >> 16)
	b[3] = byte(v >> 24)
	b[4] = byte(v >> 32)
	b[5] = byte(v >> 40)
	b[6] = byte(v >> 48)
	b[7] = byte(v >> 56)
}
