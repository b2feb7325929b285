package engine

import (
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// Defaults for the swap path's options.
const (
	DefaultSwapRetries   = 32
	DefaultSwapCacheSize = 1 << 18
)

// SwapOptions configure the compare-and-swap path, over a backend.Swapper
// (a store across a network, such as Redis). The zero value means the
// defaults.
type SwapOptions struct {
	// Retries is how many times a decision is stepped again after its
	// compare-and-swap found another record than expected, before it fails
	// with ErrStore wrapping ErrContention. Zero means DefaultSwapRetries.
	Retries int
	// CacheSize bounds the records the engine keeps as last seen, one per
	// key; zero means DefaultSwapCacheSize. A key missing from it costs
	// one more round trip, never a wrong decision.
	CacheSize int
	// ConfirmDenials makes every denial a round trip: by default a request
	// that the key's last-seen record already denies is answered from it,
	// since a decision never refunds (and a settle's refund announces
	// itself to the other processes), unless the store would forget the
	// record before its caller is full again (see the package doc for what
	// that promises, and for a Reset in another process).
	ConfirmDenials bool
}

// swapPath is the engine over a backend.Swapper, a store that cannot lend a
// lock. It keeps the last record it saw per key, steps it locally and
// commits by compare-and-swap; on a mismatch it steps again on the record
// the store returned. Callers deciding on one key at once form a queue: one
// of them, the leader, steps every queued request one after another on the
// key's record and commits them all with one compare-and-swap, then hands
// the queue that formed meanwhile to the next leader.
//
// A request that the last-seen record denies is answered from it, with no
// round trip: a record only moves towards "more spent" except by time, which
// the step accounts for, so the store's record denies it too (unless the key
// was deleted or refunded, which the store's watch reports). The exception is a denial
// whose caller is full again only after the store would forget the record
// (a rule whose rate was lowered since it was written): it goes to the
// store once, whose compare-only swap keeps the record that long
// (seenRecord). Any other request that spends nothing (a peek, or a denial
// found only on the store's record) is confirmed by a compare-only swap
// (backend.Swap.Keep). A queue mixing spending and denials costs one round
// trip in all.
type swapPath struct {
	s        backend.Swapper
	retries  int
	perShard int   // the last-seen records kept per shard
	confirm  bool  // SwapOptions.ConfirmDenials: no denial answered locally
	ttlUnit  int64 // backend.Swapper.TTLUnit's, in ns: a record's TTL is kept rounded up to it; 0: none
	shards   []swapShard
	mask     uint64
	unwatch  func() // ends the store's watch of deletions

	offset atomic.Int64 // the store's clock minus the engine's, once timed
	timed  atomic.Bool  // offset has been learned (or the store has no clock)
	latest atomic.Int64 // the latest time a reply carried (or the engine's, over a store with no clock)

	life sync.RWMutex // read-held by every call, so close can wait for them
	shut bool         // set by close; guarded by life

	swaps, conflicts, localDenials atomic.Uint64
}

// swapShard holds the queues and last-seen records of the keys hashing to
// it.
type swapShard struct {
	mu      sync.Mutex            // guards flights and seen
	flights map[string]*flight    // the keys with a leader at work
	seen    map[string]seenRecord // the last record seen per key; bounded by perShard
	_       [40]byte              // keep neighbouring shards' locks off one cache line
}

// seenRecord is the record last seen under a key, and until when the store
// is known to keep it.
type seenRecord struct {
	v []byte
	// kept is the store's time until which it keeps v: the expiry of the
	// write that made v, lengthened by the denials confirmed since; zero
	// when unknown (v was learned from a mismatch). A denial whose caller
	// is full again only after kept is not answered locally: it goes to
	// the store, whose compare-only swap lengthens the record's expiry
	// (backend.Swap.Keep), so that no process finds the record gone, and
	// its caller full, before the RetryAfter it was told.
	kept int64
}

func newSwapPath(s backend.Swapper, o *SwapOptions, n int) (*swapPath, error) {
	retries, size := o.Retries, o.CacheSize
	if retries < 0 || size < 0 {
		return nil, errorf("swap retries (%d) and swap cache size (%d) must not be negative", retries, size)
	}
	if retries == 0 {
		retries = DefaultSwapRetries
	}
	if size == 0 {
		size = DefaultSwapCacheSize
	}
	p := &swapPath{s: s, retries: retries, perShard: max(1, (size+n-1)/n), confirm: o.ConfirmDenials, shards: make([]swapShard, n), mask: uint64(n - 1)}
	p.ttlUnit = max(0, int64(s.TTLUnit()))
	for i := range p.shards {
		p.shards[i].flights = map[string]*flight{}
		p.shards[i].seen = map[string]seenRecord{}
	}
	stop, err := s.WatchDeletes(func(k []byte) { p.remember(p.shard(k), k, nil, 0) })
	if err != nil {
		return nil, err
	}
	p.unwatch = stop
	return p, nil
}

// enter starts a call: it fails with ErrClosed once the engine is closing,
// and with an error wrapping ctx.Err() once ctx is done, before anything
// is spent. A nil error must be followed by p.life.RUnlock.
func (p *swapPath) enter(ctx context.Context, e *Engine) error {
	if err := ctx.Err(); err != nil {
		if e.closed.Load() {
			return ErrClosed
		}
		return errorf("%w", err)
	}
	p.life.RLock()
	if p.shut || e.closed.Load() {
		p.life.RUnlock()
		return ErrClosed
	}
	return nil
}

// close waits for the calls in flight; later calls return ErrClosed.
func (p *swapPath) close() {
	p.life.Lock()
	p.shut = true
	p.life.Unlock()
	p.unwatch()
}

// now returns the time to step with: the store's clock as estimated from
// its last reply, learned before the first decision.
func (p *swapPath) now(ctx context.Context, e *Engine) (int64, error) {
	if !p.timed.Load() {
		if _, _, err := p.cas(ctx, e, nil); err != nil {
			return 0, err
		}
	}
	return e.now() + p.offset.Load(), nil
}

// cas sends one compare-and-swap and learns the store's clock from the
// reply. The estimate ignores the reply's travel time; a record's time
// still never goes backwards, since every step treats a time before the
// record's own as no time passed. ctx bounds the call (see
// backend.Swapper.CompareAndSwap).
func (p *swapPath) cas(ctx context.Context, e *Engine, swaps []backend.Swap) (bool, [][]byte, error) {
	p.swaps.Add(1)
	ok, cur, storeNow, err := p.s.CompareAndSwap(ctx, swaps)
	if err != nil {
		return false, nil, err
	}
	local := e.now()
	if storeNow != 0 {
		p.offset.Store(storeNow - local)
	} else {
		storeNow = local + p.offset.Load()
	}
	p.observe(storeNow)
	p.timed.Store(true)
	if !ok {
		p.conflicts.Add(1)
		if len(cur) != len(swaps) {
			return false, nil, errorf("compare-and-swap returned %d records for %d keys", len(cur), len(swaps))
		}
	}
	return ok, cur, nil
}

// swapError is the error of a call to the store that failed with err under
// ctx: when ctx ended, an error wrapping ctx's, which is no failure of the
// store's and is not counted; else an ErrStore.
func (e *Engine) swapError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return errorf("swap: %w", err)
	}
	return e.storeError("swap", err)
}

// sharedCtx returns the context a compare-and-swap carrying the requests of
// several callers is sent with, ctxs being theirs: one caller's
// cancellation does not end it (the others wait for its answer); it
// carries the first's values (a trace); its deadline is the latest of
// theirs when every one has one, else none but the store's own. The
// CancelFunc releases it.
func sharedCtx(ctxs iter.Seq[context.Context]) (context.Context, context.CancelFunc) {
	var first context.Context
	var latest time.Time
	bounded := true
	for c := range ctxs {
		if first == nil {
			first = c
		}
		d, ok := c.Deadline()
		bounded = bounded && ok
		if d.After(latest) {
			latest = d
		}
	}
	if first == nil {
		return context.Background(), func() {}
	}
	shared := context.WithoutCancel(first)
	if !bounded {
		return shared, func() {}
	}
	return context.WithDeadline(shared, latest)
}

// observe records t as a time the store has seen: a reply's, or a sweep's.
func (p *swapPath) observe(t int64) {
	for {
		l := p.latest.Load()
		if t <= l || p.latest.CompareAndSwap(l, t) {
			return
		}
	}
}

func (p *swapPath) shard(k []byte) *swapShard { return &p.shards[backend.Hash(k)&p.mask] }

// lastSeen returns the record last seen under k and until when the store
// keeps it (a miss is treated as an absent record: right for a key's first
// request, and otherwise corrected by one mismatch).
func (sh *swapShard) lastSeen(k []byte) seenRecord {
	sh.mu.Lock()
	r := sh.seen[string(k)]
	sh.mu.Unlock()
	return r
}

// current returns r as the store holds it at now, by the store's clock: r
// itself, or absent once the store has forgotten it. kept was reckoned
// from the time the record was stepped, which is before the store wrote
// it by a round trip (the estimate of the store's clock lags it by a
// reply's travel), just as now is before this swap reaches the store: the
// two lags cancel, give or take their difference. Either guess is safe: a
// wrong one costs a mismatch, whose reply carries the record.
func (p *swapPath) current(r seenRecord, now int64) seenRecord {
	if r.kept != 0 && now >= r.kept {
		return seenRecord{}
	}
	return r
}

// remember keeps v as the record last seen under k, kept by the store until
// kept (zero: unknown), making room by forgetting another key's when the
// shard holds perShard already: a forgotten record costs a round trip,
// never a wrong decision.
func (p *swapPath) remember(sh *swapShard, k, v []byte, kept int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if v == nil {
		delete(sh.seen, string(k))
		return
	}
	if _, ok := sh.seen[string(k)]; !ok && len(sh.seen) >= p.perShard {
		for old := range sh.seen {
			delete(sh.seen, old)
			break
		}
	}
	sh.seen[string(k)] = seenRecord{v, kept}
}

// reset deletes k's record from the store and forgets the last-seen one.
func (p *swapPath) reset(ctx context.Context, e *Engine, k []byte) error {
	if err := p.enter(ctx, e); err != nil {
		return err
	}
	defer p.life.RUnlock()
	sh := p.shard(k)
	p.remember(sh, k, nil, 0)
	if err := p.s.Delete(k); err != nil {
		return e.storeError("delete", err)
	}
	// A decision in flight may have remembered the record just deleted;
	// that would cost it a mismatch, but forgetting it again is free.
	p.remember(sh, k, nil, 0)
	return nil
}
