package engine

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/table"
)

// Durability says when a decision's new record reaches a durable backend
// (a backend.Durable, such as Pebble or bbolt).
type Durability int

const (
	// Interval, the default, writes changed records to the backend in
	// batches at least every FlushInterval, and on Close. A crash of the
	// process forgets at most the spending of the last flush interval (plus
	// the flush in progress): at a rate of r decisions per second per key,
	// at most r × FlushInterval admissions per key are forgotten. While a
	// flush fails (a full disk), that bound does not hold, and every
	// decision that spends returns an error wrapping ErrStore, its spending
	// kept in memory until a flush writes it (see Engine.StoreHealth).
	Interval Durability = iota
	// Sync makes every new record durable (fsync) before Apply returns.
	// Concurrent callers share one commit (group commit), so decisions per
	// second grow with the number of concurrent callers.
	Sync
)

// String returns "interval" or "sync".
func (d Durability) String() string {
	switch d {
	case Interval:
		return "interval"
	case Sync:
		return "sync"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// ParseDurability parses "interval" or "sync".
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "interval":
		return Interval, nil
	case "sync":
		return Sync, nil
	}
	return 0, fmt.Errorf("sluice/engine: unknown durability %q (want interval or sync)", s)
}

// Defaults for the durable tier's options.
const (
	DefaultFlushInterval = 50 * time.Millisecond
	DefaultMaxDirty      = 1 << 16
)

// tier is the engine's in-memory tier over a durable backend. A table.Table
// (the memory store's) holds every record in use, so a hot key costs no disk read and is stepped in
// place; records are loaded from disk on first use (never all at start) and
// written back in batches (Interval) or through group commit (Sync).
//
// The table is the cache of record: every write lands in it under the
// stripe lock before anything else sees it, so it never serves a record older
// than the last one written. A cache whose inserts are asynchronous or
// lossy could, which is why no such cache sits on this path.
//
// tier implements backend.Striped; its stripes are the table's.
type tier struct {
	cache    *table.Table
	disk     backend.Durable
	mode     Durability
	clock    Clock
	maxDirty int64

	stripes []tierStripe // stripe i is guarded by the cache's stripe lock i
	// dirty counts the records the disk lacks: those marked dirty in all
	// stripes, and those a flush or recommit has taken from the stripes
	// and not yet written. A taken record is counted until its write has
	// ended (a failed one marks it again first), so that dirty never reads
	// zero while a write that holds a spending is in flight.
	dirty atomic.Int64
	// taken is the part of dirty an Interval flush has taken and not yet
	// written: settle's backpressure counts the marked records only, so
	// that decisions do not queue behind a flush in flight.
	taken  atomic.Int64
	commit committer // Sync mode's group commit

	flushMu sync.Mutex // serialises flushes: at most one batch in flight
	// The flush's buffers, kept from one flush to the next (flushMu).
	fbuf         []byte
	fspans       []flushSpan
	fhashes      []uint64
	fwrites      []backend.Write
	flushes      atomic.Uint64
	flushErrors  atomic.Uint64
	commitErrors atomic.Uint64 // Sync mode's failed group commits
	flushNanos   atomic.Uint64 // total time spent in flush writes

	health storeHealth // whether the disk takes writes; see noteWrite

	stop chan struct{} // closed by close to stop the flusher
	done chan struct{} // closed when the flusher returns
}

// tierStripe is the tier's state for one stripe.
type tierStripe struct {
	// dirty holds the keys whose cached record the disk lacks: every
	// changed key in Interval mode, keys whose commit failed in Sync mode.
	dirty dirtySet
	// deletes holds, in Sync mode, keys whose deletion is enqueued but not
	// yet committed, with its ticket: until then the disk still has the
	// old record and must not be read for them.
	deletes map[string]uint64
	// ticket is the commit ticket of the last write made by the caller
	// holding the stripe.
	ticket uint64
	// known holds, by hash, keys this process has loaded or written: the
	// disk's record of such a key is never newer than the cache's, so when
	// the cache has none (it expired, or was swept as expired), the disk's
	// has expired too and need not be read. A slot holds one key's hash
	// (with the low bit set, so that zero means empty); a key whose slot
	// another has taken is read from disk as before, unless the cache
	// still holds its expired entry, which tells the same.
	known []uint64
}

// dirtySet is one stripe's set of dirty keys, built so that marking a key
// costs no allocation once the stripe has held as many: the keys' bytes
// live in one buffer, their entries in one slice, and a map from hash to
// entry finds them. All three keep their room when the set is emptied by a
// flush, so a key dirtied again every interval is marked without growing
// anything.
type dirtySet struct {
	idx  map[uint64]int32 // hash → the last entry added with that hash
	ents []dirtyRecord
	keys []byte // every entry's key, back to back
}

type dirtyRecord struct {
	hash      uint64
	expiresAt int64
	off, n    uint32 // the key, in dirtySet.keys
	next      int32  // the entry added before this one with the same hash, or -1
	deleted   bool
}

// find returns k's entry, or nil.
func (d *dirtySet) find(h uint64, k []byte) *dirtyRecord {
	j, ok := d.idx[h]
	if !ok {
		return nil
	}
	for j >= 0 {
		e := &d.ents[j]
		if string(d.keys[e.off:e.off+e.n]) == string(k) {
			return e
		}
		j = e.next
	}
	return nil
}

// add adds k, which find did not find, and returns its entry.
func (d *dirtySet) add(h uint64, k []byte) *dirtyRecord {
	if d.idx == nil {
		d.idx = map[uint64]int32{}
	}
	next, ok := d.idx[h]
	if !ok {
		next = -1
	}
	off := len(d.keys)
	d.keys = append(d.keys, k...)
	d.ents = append(d.ents, dirtyRecord{hash: h, off: uint32(off), n: uint32(len(k)), next: next})
	d.idx[h] = int32(len(d.ents) - 1)
	return &d.ents[len(d.ents)-1]
}

// key returns e's key, valid until the set is reset.
func (d *dirtySet) key(e *dirtyRecord) []byte { return d.keys[e.off : e.off+e.n : e.off+e.n] }

func (d *dirtySet) len() int { return len(d.ents) }

// reset empties the set, keeping its room.
func (d *dirtySet) reset() {
	d.ents, d.keys = d.ents[:0], d.keys[:0]
	clear(d.idx)
}

// knownSlots is the number of hashes each tier remembers in all (2 MiB),
// in sets of knownWays. A hash may live in either of two sets and goes to
// the emptier, so sets fill evenly: 100,000 keys fill it to 38% and none
// is lost to a full set (with one set per hash, about one in a hundred
// were); past about 150,000 some are, and a lost key costs only the disk
// read that every miss cost before.
const (
	knownSlots = 1 << 18
	knownWays  = 4
)

// knownSets returns the two sets of slots h may be remembered in: one
// picked by the hash's high bits (the low ones chose the stripe), the
// other by a mix of all of them.
func (st *tierStripe) knownSets(h uint64) (a, b []uint64) {
	n := uint64(len(st.known) / knownWays)
	i := int((h>>32)%n) * knownWays
	m := h ^ h>>33
	m *= 0xff51afd7ed558ccd
	m ^= m >> 33
	j := int((m>>32)%n) * knownWays
	return st.known[i : i+knownWays : i+knownWays], st.known[j : j+knownWays : j+knownWays]
}

func (st *tierStripe) isKnown(h uint64) bool {
	a, b := st.knownSets(h)
	for i := range knownWays {
		if a[i] == h|1 || b[i] == h|1 {
			return true
		}
	}
	return false
}

// remember records h in the emptier of its sets, or, both full, in place
// of one of the first set's others, chosen by bits of h the sets were not.
func (st *tierStripe) remember(h uint64) {
	a, b := st.knownSets(h)
	fa, fb := -1, -1 // a free slot in each set
	na, nb := 0, 0   // free slots in each set
	for i := range knownWays {
		if a[i] == h|1 || b[i] == h|1 {
			return
		}
		if a[i] == 0 {
			na++
			if fa < 0 {
				fa = i
			}
		}
		if b[i] == 0 {
			nb++
			if fb < 0 {
				fb = i
			}
		}
	}
	switch {
	case na > 0 && na >= nb:
		a[fa] = h | 1
	case nb > 0:
		b[fb] = h | 1
	default:
		a[(h>>16)%knownWays] = h | 1
	}
}

var _ backend.Striped = (*tier)(nil)

// storeHealth is the state of the tier's writes to the disk. An episode of
// failure starts at a failed flush or commit and ends at the next one that
// succeeds; each end is logged once, so a disk that stays full for an hour
// costs two log lines, not one per flush.
type storeHealth struct {
	failing atomic.Bool // an episode is on: read by every settle

	mu       sync.Mutex // guards the fields below
	err      error      // the last failed write's error, while failing
	since    time.Time  // when the episode started
	failures uint64     // failed writes in the episode
	episodes uint64     // episodes since the engine was opened

	log   *slog.Logger
	retry time.Duration // the flush interval, how often the flusher retries
}

// noteWrite records the outcome of a write of the tier to the disk (a flush,
// a group commit), and logs the start and the end of an episode of failure.
// complete says that, the write having succeeded, the disk holds every
// record the failed writes left in memory: a flush writes them all, but a
// group commit only its callers'; an episode ends only then, so that a
// store whose writes fail now and then (bbolt on a full disk reuses its
// free pages) does not log an episode per write.
func (h *storeHealth) noteWrite(err error, complete bool) {
	if err == nil && (!complete || !h.failing.Load()) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil && !h.failing.Load():
		h.err, h.since, h.failures = err, time.Now(), 1
		h.episodes++
		h.failing.Store(true)
		h.log.Error("sluice/engine: the durable store fails to write; decisions that spend answer store errors (on_store_error decides), keep their spending in memory and are written once the store takes writes again, retried every "+h.retry.String(),
			"err", err)
	case err != nil:
		h.err = err
		h.failures++
	case h.failing.Load():
		h.log.Info("sluice/engine: the durable store writes again; the spending kept in memory is being written",
			"failed_for", time.Since(h.since).Round(time.Millisecond).String(), "failed_writes", h.failures, "last_err", h.err)
		h.err, h.failures = nil, 0
		h.failing.Store(false)
	}
}

// state returns the episode's error (nil when the disk takes writes) and
// when it started.
func (h *storeHealth) state() (error, time.Time) {
	if !h.failing.Load() {
		return nil, time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err, h.since
}

func newTier(disk backend.Durable, o *Options, clock Clock, log *slog.Logger) (*tier, error) {
	interval := o.FlushInterval
	if interval == 0 {
		interval = DefaultFlushInterval
	}
	if interval < 0 {
		return nil, fmt.Errorf("sluice/engine: flush interval must be positive, got %v", interval)
	}
	maxDirty := int64(o.MaxDirty)
	if maxDirty <= 0 {
		maxDirty = DefaultMaxDirty
	}
	if o.Durability != Interval && o.Durability != Sync {
		return nil, fmt.Errorf("sluice/engine: unknown durability %d", int(o.Durability))
	}
	cache := table.New(&table.Options{Shards: o.Stripes, Now: clock.Now})
	t := &tier{
		cache:    cache,
		disk:     disk,
		mode:     o.Durability,
		clock:    clock,
		maxDirty: maxDirty,
		stripes:  make([]tierStripe, cache.Stripes()),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	perStripe := max(knownWays, knownSlots/len(t.stripes))
	for i := range t.stripes {
		t.stripes[i].known = make([]uint64, perStripe)
	}
	t.health.log, t.health.retry = log, interval
	t.commit.batch = disk
	t.commit.onFail = t.remark
	t.commit.onDone = func(err error) {
		if err != nil {
			t.commitErrors.Add(1)
		}
		// Records whose commit failed are dirty until the flusher's
		// recommit writes them.
		t.health.noteWrite(err, t.dirty.Load() == 0)
	}
	t.commit.cond.L = &t.commit.mu
	go t.flusher(interval)
	return t, nil
}

func (t *tier) stripe(h uint64) *tierStripe { return &t.stripes[h&uint64(len(t.stripes)-1)] }

// Stripes returns the cache's stripe count.
func (t *tier) Stripes() int { return t.cache.Stripes() }

// Lock locks stripe i.
func (t *tier) Lock(i int) { t.cache.Lock(i) }

// Unlock unlocks stripe i.
func (t *tier) Unlock(i int) { t.cache.Unlock(i) }

// Len returns the number of records the cache holds.
func (t *tier) Len() int { return t.cache.Len() }

// Evictions returns the number of expired records swept from the cache.
func (t *tier) Evictions() uint64 { return t.cache.Evictions() }

// Sweep sweeps the cache (the disk sweeps itself, on its own schedule).
func (t *tier) Sweep(now int64, budget int) (int, error) { return t.cache.Sweep(now, budget) }

// GetLocked returns the cached record, loading it from disk on a miss. The
// disk read is the only I/O done under a stripe lock, once per key per
// process lifetime: a key the tier has seen and whose cached record expired
// is known to be expired on disk too.
func (t *tier) GetLocked(h uint64, k []byte, now int64) ([]byte, error) {
	v, err := t.cache.GetLocked(h, k, now)
	if v != nil || err != nil {
		return v, err
	}
	st := t.stripe(h)
	if st.dirty.find(h, k) != nil {
		return nil, nil // deleted or expired here since the disk last heard of it
	}
	if tk, ok := st.deletes[string(k)]; ok {
		if !t.commit.committed(tk) {
			return nil, nil
		}
		delete(st.deletes, string(k))
	}
	if st.isKnown(h) {
		return nil, nil // the cache's record expired, so the disk's has too
	}
	if _, ref, _ := t.cache.LookupLocked(h, k, now); ref != (table.Ref{}) {
		// The cache holds the key's entry, expired (GetLocked found no
		// live record): the same as a known key, whose slot another key
		// has taken. The lookup finds the entry GetLocked just found.
		return nil, nil
	}
	v, exp, err := t.disk.Load(k, now)
	if err != nil {
		return nil, err
	}
	st.remember(h)
	if v == nil {
		return nil, nil
	}
	if err := t.cache.PutLocked(h, k, v, exp); err != nil {
		return v, nil // serve the loaded copy; it is the caller's to step
	}
	return t.cache.GetLocked(h, k, now)
}

// PutLocked writes the record to the cache and marks it for the disk.
func (t *tier) PutLocked(h uint64, k, v []byte, exp int64) error {
	if err := t.cache.PutLocked(h, k, v, exp); err != nil {
		return err
	}
	// Not remembered here: every decision reads the key before it writes
	// it, and the read that loaded it remembered it; a write of a key never
	// read (Put) leaves it to be read from disk once, as before.
	st := t.stripe(h)
	if t.mode == Sync {
		st.ticket = t.commit.enqueue(backend.Write{Key: clone(k), Value: clone(v), ExpiresAt: exp}, h)
		return nil
	}
	t.markDirty(st, h, k, exp, false)
	return nil
}

// ExtendLocked lengthens the expiry of the cached record and writes the
// record back as PutLocked does, so that the disk's copy is kept as long.
func (t *tier) ExtendLocked(h uint64, k []byte, now, exp int64) (bool, error) {
	ok, err := t.cache.ExtendLocked(h, k, now, exp)
	if !ok || err != nil {
		return false, err
	}
	v, err := t.cache.GetLocked(h, k, now)
	if err == nil {
		err = t.PutLocked(h, k, v, exp) // v is the cache's own: rewritten in place
	}
	return true, err
}

// DeleteLocked removes the record from the cache and from the disk.
func (t *tier) DeleteLocked(h uint64, k []byte) error {
	if err := t.cache.DeleteLocked(h, k); err != nil {
		return err
	}
	st := t.stripe(h)
	if t.mode == Sync {
		st.ticket = t.commit.enqueue(backend.Write{Key: clone(k), Delete: true}, h)
		if st.deletes == nil {
			st.deletes = map[string]uint64{}
		}
		st.deletes[string(k)] = st.ticket
		return nil
	}
	t.markDirty(st, h, k, 0, true)
	return nil
}

func (t *tier) markDirty(st *tierStripe, h uint64, k []byte, exp int64, deleted bool) {
	d := st.dirty.find(h, k)
	if d == nil {
		d = st.dirty.add(h, k)
		t.dirty.Add(1)
	}
	d.expiresAt, d.deleted = exp, deleted
}

// Get, Put and Delete serve callers that do not hold a stripe lock.
func (t *tier) Get(k []byte, now int64) ([]byte, error) {
	h, i := t.locate(k)
	t.Lock(i)
	defer t.Unlock(i)
	v, err := t.GetLocked(h, k, now)
	return clone(v), err
}

func (t *tier) Put(k, v []byte, exp int64) error {
	h, i := t.locate(k)
	t.Lock(i)
	err := t.PutLocked(h, k, v, exp)
	tk := t.stripes[i].ticket
	t.Unlock(i)
	if err == nil {
		err = t.settle(tk)
	}
	return err
}

func (t *tier) Delete(k []byte) error {
	h, i := t.locate(k)
	t.Lock(i)
	err := t.DeleteLocked(h, k)
	tk := t.stripes[i].ticket
	t.Unlock(i)
	if err == nil {
		err = t.settle(tk)
	}
	return err
}

func (t *tier) locate(k []byte) (uint64, int) {
	h := hashKey(k)
	return h, int(h & uint64(len(t.stripes)-1))
}

// settle is what a caller does after releasing its stripe: in Sync mode wait
// for its commit; in Interval mode, when too many records await a flush,
// flush now rather than let them grow without bound.
func (t *tier) settle(ticket uint64) error {
	if t.mode == Sync {
		return t.commit.await(ticket)
	}
	if t.health.failing.Load() {
		// The spending is in memory only, and stays there until the disk
		// takes writes again: the caller's decision is not durable as
		// Interval promises, which is a store error, as in Sync mode.
		if err, _ := t.health.state(); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
	}
	if t.dirty.Load()-t.taken.Load() > t.maxDirty {
		return t.flush()
	}
	return nil
}

func (t *tier) flusher(interval time.Duration) {
	defer close(t.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.flush() // a failed flush keeps its records dirty; the next tick retries
		}
	}
}

// flush writes every dirty record to the disk in one batch. Records that
// fail to write stay dirty and are retried by the next flush.
//
// The batch is built in buffers the tier keeps from one flush to the next
// (guarded by flushMu): every key and record is copied, under its stripe
// lock, into one byte buffer, so a flush of n records costs no allocation
// per record, and none at all once the buffers have grown to the size the
// flushes take.
func (t *tier) flush() error {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	if t.mode == Sync {
		return t.recommit()
	}
	now := t.clock.Now()
	buf, spans, hashes := t.fbuf[:0], t.fspans[:0], t.fhashes[:0]
	for i := range t.stripes {
		st := &t.stripes[i]
		t.cache.Lock(i)
		for j := range st.dirty.ents {
			d := &st.dirty.ents[j]
			k := st.dirty.key(d)
			sp := flushSpan{koff: len(buf), kn: len(k), expiresAt: d.expiresAt, deleted: d.deleted}
			buf = append(buf, k...)
			if !d.deleted {
				v, _ := t.cache.GetLocked(d.hash, k, now)
				if v == nil {
					sp.deleted = true // expired: the disk copy may go too
				} else {
					sp.voff, sp.vn = len(buf), len(v)
					buf = append(buf, v...)
				}
			}
			spans = append(spans, sp)
			hashes = append(hashes, d.hash)
		}
		// Still counted in t.dirty until the write has ended.
		t.taken.Add(int64(st.dirty.len()))
		st.dirty.reset()
		t.cache.Unlock(i)
	}
	writes := t.fwrites[:0]
	for _, sp := range spans {
		w := backend.Write{Key: buf[sp.koff : sp.koff+sp.kn : sp.koff+sp.kn], ExpiresAt: sp.expiresAt, Delete: sp.deleted}
		if !sp.deleted {
			w.Value = buf[sp.voff : sp.voff+sp.vn : sp.voff+sp.vn]
		}
		writes = append(writes, w)
	}
	t.fbuf, t.fspans, t.fhashes, t.fwrites = buf, spans, hashes, writes
	if len(writes) == 0 {
		return nil
	}
	defer t.taken.Add(-int64(len(writes)))
	start := time.Now()
	err := t.disk.WriteBatch(writes, false)
	t.flushNanos.Add(uint64(time.Since(start)))
	t.flushes.Add(1)
	if err != nil {
		t.flushErrors.Add(1)
		t.remark(writes, hashes)
	}
	// The batch's records are on disk, or marked dirty again: no longer
	// in flight.
	t.dirty.Add(-int64(len(writes)))
	t.health.noteWrite(err, true)
	if err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// flushSpan is one record of a flush, located in the flush's buffer.
type flushSpan struct {
	koff, kn, voff, vn int
	expiresAt          int64
	deleted            bool
}

// remark marks the keys of writes that did not reach the disk dirty again,
// unless a newer change has marked them since.
func (t *tier) remark(writes []backend.Write, hashes []uint64) {
	for j, w := range writes {
		i := int(hashes[j] & uint64(len(t.stripes)-1))
		t.cache.Lock(i)
		st := &t.stripes[i]
		if st.dirty.find(hashes[j], w.Key) == nil {
			t.markDirty(st, hashes[j], w.Key, w.ExpiresAt, w.Delete)
		}
		t.cache.Unlock(i)
	}
}

// recommit is Sync mode's retry: records whose commit failed are enqueued
// again from the cache (under their stripe lock, so in order with newer
// writes) and committed.
func (t *tier) recommit() error {
	if t.dirty.Load() == 0 {
		return nil
	}
	now := t.clock.Now()
	var last uint64
	var taken int64
	for i := range t.stripes {
		st := &t.stripes[i]
		t.cache.Lock(i)
		for j := range st.dirty.ents {
			d := &st.dirty.ents[j]
			w := backend.Write{Key: clone(st.dirty.key(d)), ExpiresAt: d.expiresAt, Delete: d.deleted}
			if v, _ := t.cache.GetLocked(d.hash, w.Key, now); v != nil && !d.deleted {
				w.Value = clone(v)
			} else {
				w.Delete = true
			}
			last = t.commit.enqueue(w, d.hash)
		}
		// Still counted in t.dirty until the commit has ended.
		taken += int64(st.dirty.len())
		st.dirty.reset()
		// Forget committed deletions while the stripe is held.
		for k, tk := range st.deletes {
			if t.commit.committed(tk) {
				delete(st.deletes, k)
			}
		}
		t.cache.Unlock(i)
	}
	if last == 0 {
		return nil
	}
	err := t.commit.await(last)
	// The records are on disk, or marked dirty again by a failed commit
	// (committer.onFail): no longer in flight. The commit's own onDone
	// still counted them, so the episode's end, if this was the last
	// write the disk lacked, is noted here.
	t.dirty.Add(-taken)
	if err == nil {
		t.health.noteWrite(nil, t.dirty.Load() == 0)
	}
	return err
}

// Close flushes what is dirty, stops the flusher and closes the cache and
// the disk.
func (t *tier) Close() error {
	close(t.stop)
	<-t.done
	err := t.flush()
	if t.mode == Sync {
		// Everything enqueued has been awaited by its caller, but a caller
		// that died between enqueue and await leaves a tail: commit it.
		if err2 := t.commit.await(t.commit.lastIssued()); err == nil {
			err = err2
		}
	}
	t.cache.Close()
	if err2 := t.disk.Close(); err == nil {
		err = err2
	}
	return err
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// committer is Sync mode's group commit. Callers enqueue a write under their
// stripe lock, release it, then await their ticket. The first awaiting
// caller becomes the leader and commits everything queued in one synced
// batch; the callers that queued meanwhile wait for it, or lead the next.
type committer struct {
	batch  backend.Durable
	onFail func([]backend.Write, []uint64)
	onDone func(error) // told every commit's outcome

	mu       sync.Mutex // guards everything below
	cond     sync.Cond  // signalled when a commit finishes
	queue    []backend.Write
	hashes   []uint64
	issued   uint64 // the last ticket issued
	done     uint64 // every ticket up to this one has been committed or failed
	busy     bool   // a leader is committing
	failures []commitFailure
	commits  uint64
}

type commitFailure struct {
	lo, hi uint64
	err    error
}

// maxFailures bounds the failed ranges remembered for late awaiters.
const maxFailures = 256

// maxGatherYields bounds the yields a commit leader makes while callers
// keep joining its commit.
const maxGatherYields = 8

func (c *committer) enqueue(w backend.Write, h uint64) uint64 {
	c.mu.Lock()
	c.queue = append(c.queue, w)
	c.hashes = append(c.hashes, h)
	c.issued++
	t := c.issued
	c.mu.Unlock()
	return t
}

func (c *committer) lastIssued() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.issued
}

func (c *committer) committed(t uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done >= t
}

func (c *committer) await(t uint64) error {
	if t == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.done < t {
		if c.busy {
			c.cond.Wait()
			continue
		}
		c.busy = true
		// Let callers that are about to enqueue join this commit: yield
		// while the queue still grows, at most maxGatherYields times. A
		// lone caller yields once, which costs it nothing; a crowd
		// released by the last commit, whose members each decide again
		// before they enqueue, gets to share one fsync rather than split
		// into a commit of the first arrivals and one of the rest.
		for n, i := len(c.queue), 0; i < maxGatherYields; i++ {
			c.mu.Unlock()
			runtime.Gosched()
			c.mu.Lock()
			if len(c.queue) == n {
				break
			}
			n = len(c.queue)
		}
		writes, hashes := c.queue, c.hashes
		c.queue, c.hashes = nil, nil
		lo, hi := c.done+1, c.issued
		c.mu.Unlock()
		err := c.batch.WriteBatch(writes, true)
		if err != nil && c.onFail != nil {
			c.onFail(writes, hashes)
		}
		if c.onDone != nil {
			c.onDone(err)
		}
		c.mu.Lock()
		if err != nil {
			if len(c.failures) == maxFailures {
				c.failures = c.failures[1:]
			}
			c.failures = append(c.failures, commitFailure{lo, hi, err})
		}
		c.commits++
		c.done, c.busy = hi, false
		c.cond.Broadcast()
	}
	for _, f := range c.failures {
		if f.lo <= t && t <= f.hi {
			return fmt.Errorf("commit: %w", f.err)
		}
	}
	return nil
}
