package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
)

// Defaults for the swap path's options.
const (
	DefaultSwapRetries   = 32
	DefaultSwapCacheSize = 1 << 18
)

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
// was deleted, which the store's watch of deletions reports). The exception is a denial
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
	perShard int  // the last-seen records kept per shard
	confirm  bool // Options.ConfirmDenials: no denial answered locally
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

// flight is one key's queue of callers waiting for the leader's next
// commit. Flights are reused through flights once their key's last leader
// is done with them.
type flight struct {
	queue []*waiter
	first [1]*waiter      // the queue's array while it holds only its first caller
	swap  [1]backend.Swap // the leader's compare-and-swap
}

// flights holds idle flights: a decision on a key with no queue takes one
// instead of allocating it and its queue.
var flights = sync.Pool{New: func() any { return new(flight) }}

// waiter is one caller's request in a flight.
type waiter struct {
	limit algo.Algorithm
	ns    string
	key   string
	cost  int64
	spend bool
	d     algo.Decision // the decision, or zero with err
	err   error
	wake  chan bool // receives true to lead the next batch (or, multi, to own the key), false once decided
	// multi marks an ApplyAll waiting to own the key: it is no part of a
	// leader's batch, and is woken, off the queue, once the batch before
	// it is done.
	multi bool
	buf   [64]byte // deniedLocally's copy of the last-seen record
}

func newSwapPath(s backend.Swapper, o *Options, n int) (*swapPath, error) {
	retries, size := o.SwapRetries, o.SwapCacheSize
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

// enter starts a call: it fails with ErrClosed once the engine is closing.
// A nil error must be followed by p.life.RUnlock.
func (p *swapPath) enter(e *Engine) error {
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
func (p *swapPath) now(e *Engine) (int64, error) {
	if !p.timed.Load() {
		if _, _, err := p.cas(e, nil); err != nil {
			return 0, err
		}
	}
	return e.now() + p.offset.Load(), nil
}

// cas sends one compare-and-swap and learns the store's clock from the
// reply. The estimate ignores the reply's travel time; a record's time
// still never goes backwards, since every step treats a time before the
// record's own as no time passed.
func (p *swapPath) cas(e *Engine, swaps []backend.Swap) (bool, [][]byte, error) {
	p.swaps.Add(1)
	ok, cur, storeNow, err := p.s.CompareAndSwap(swaps)
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

// apply decides one request through the key's queue.
func (p *swapPath) apply(e *Engine, l Limit, key string, cost int64, spend bool, d *algo.Decision) error {
	if err := p.enter(e); err != nil {
		return err
	}
	defer p.life.RUnlock()
	k := AppendKey(make([]byte, 0, binary.MaxVarintLen64+len(l.Namespace)+len(key)), l.Namespace, key)
	sh := p.shard(k)
	// The waiter has its own decision, copied out at the end: a pointer to
	// the caller's would move it to the heap on every path.
	w := &waiter{limit: l.Algorithm, ns: l.Namespace, key: key, cost: cost, spend: spend}
	if spend && !p.confirm {
		denied, err := p.deniedLocally(e, sh, k, l.Algorithm, cost, d, w.buf[:0])
		if denied || err != nil {
			return err
		}
	}
	sh.mu.Lock()
	f := sh.flights[string(k)]
	if f == nil {
		f = flights.Get().(*flight)
		f.first[0] = w
		f.queue = f.first[:1:1]
		sh.flights[string(k)] = f
		sh.mu.Unlock()
	} else {
		w.wake = make(chan bool, 1)
		f.queue = append(f.queue, w)
		sh.mu.Unlock()
		if lead := <-w.wake; !lead {
			*d = w.d
			return w.err
		}
	}
	p.lead(e, sh, k, f, w)
	*d = w.d
	return w.err
}

// deniedLocally steps the record last seen under k, without spending, and
// reports whether it denies the request: the store's record, at least as
// spent, would deny it too, so the denial is answered with no round trip.
// A key with no last-seen record is not denied here. buf is room for the
// copy the step writes in place.
func (p *swapPath) deniedLocally(e *Engine, sh *swapShard, k []byte, a algo.Algorithm, cost int64, d *algo.Decision, buf []byte) (bool, error) {
	sh.mu.Lock()
	rec, ok := sh.seen[string(k)]
	state := append(buf, rec.v...) // the step writes in place
	sh.mu.Unlock()
	if !ok {
		return false, nil
	}
	now, err := p.now(e)
	if err != nil {
		return false, e.storeError("swap", err)
	}
	if now < p.latest.Load() {
		// The clock stepped back (or a reply's travel time made the
		// estimate jitter): the store may have expired the record at a
		// time the engine has since seen, and stepping it now would not
		// be stepping nothing.
		return false, nil
	}
	if p.current(rec, now).v == nil {
		// The store has forgotten the record: the caller is full.
		return false, nil
	}
	algo.StepInto(a, state, now, cost, d)
	if d.Allowed || d.CorruptState || addSat(now, d.Reset) > rec.kept {
		// Allowed, or the store's to answer: a denial whose record the
		// store would forget before its caller is full again goes to the
		// store, which keeps the record longer (see seenRecord).
		*d = algo.Decision{}
		return false, nil
	}
	p.localDenials.Add(1)
	return true, nil
}

// lead decides the queued requests of k as one batch (the queue up to an
// ApplyAll waiting to own the key), wakes the batch's callers and passes
// the queue on.
func (p *swapPath) lead(e *Engine, sh *swapShard, k []byte, f *flight, self *waiter) {
	sh.mu.Lock()
	batch := f.queue
	i := 1
	for i < len(batch) && !batch[i].multi {
		i++
	}
	batch, f.queue = batch[:i:i], batch[i:]
	sh.mu.Unlock()

	p.decide(e, sh, k, f, batch)

	if err := batch[0].err; err != nil && !errors.Is(err, ErrContention) {
		// The store failed this key's call (a deadline, a lost
		// connection, an open breaker): the callers that queued behind
		// it before it was sent, who have waited all of it, fail with
		// it rather than each wait out a call of their own, so that no
		// decision waits much longer than one call's deadline while the
		// store does not answer. Those that came later, and an ApplyAll
		// waiting to own the key, keep their turn: the store may be back.
		sh.mu.Lock()
		i := 0
		for i < len(f.queue) && !f.queue[i].multi {
			i++
		}
		behind := f.queue[:i:i]
		f.queue = f.queue[i:]
		sh.mu.Unlock()
		for _, w := range behind {
			w.d, w.err = algo.Decision{}, err
			w.wake <- false
		}
	}
	for _, w := range batch {
		if w != self {
			w.wake <- false
		}
	}
	p.release(sh, k, f)
}

// release passes k's queue on to its first caller, who leads the next
// batch or, an ApplyAll, owns the key; with no caller waiting, the flight
// ends.
func (p *swapPath) release(sh *swapShard, k []byte, f *flight) {
	sh.mu.Lock()
	if len(f.queue) == 0 {
		delete(sh.flights, string(k))
		sh.mu.Unlock()
		// No caller can reach f any more: it left the map under the
		// lock, and its last batch has been answered.
		f.queue, f.first[0], f.swap[0] = nil, nil, backend.Swap{}
		flights.Put(f)
		return
	}
	next := f.queue[0]
	if next.multi {
		f.queue = f.queue[1:]
	}
	sh.mu.Unlock()
	next.wake <- true
}

// own makes the caller the owner of k's queue, as a leader is, waiting its
// turn behind the callers already queued: while it owns the key no other
// caller in the process decides on it, so that an ApplyAll's
// compare-and-swap never conflicts with this process' own. It must be
// followed by release.
func (p *swapPath) own(sh *swapShard, k []byte) *flight {
	sh.mu.Lock()
	f := sh.flights[string(k)]
	if f == nil {
		f = flights.Get().(*flight)
		sh.flights[string(k)] = f
		sh.mu.Unlock()
		return f
	}
	w := &waiter{multi: true, wake: make(chan bool, 1)}
	f.queue = append(f.queue, w)
	sh.mu.Unlock()
	<-w.wake
	return f
}

// decide steps the batch's requests in order on k's record and commits the
// outcome with one compare-and-swap, stepping again on the store's record
// after a mismatch, at most p.retries times.
func (p *swapPath) decide(e *Engine, sh *swapShard, k []byte, f *flight, batch []*waiter) {
	seen := sh.lastSeen(k)
	expected, kept := seen.v, seen.kept
	var peek []byte
	fail := func(err error) {
		err = e.storeError("swap", err)
		for _, w := range batch {
			w.d, w.err = algo.Decision{}, err
		}
	}
	for attempt := 0; ; attempt++ {
		now, err := p.now(e)
		if err != nil {
			fail(err)
			return
		}
		if attempt == 0 {
			seen = p.current(seen, now)
			expected, kept = seen.v, seen.kept
		}
		// Step a copy: the steps write in place, and expected is what
		// the swap compares against.
		state := append([]byte(nil), expected...)
		if expected == nil {
			state = nil
		}
		swap := backend.Swap{Key: k, Expected: expected, Keep: true}
		for _, w := range batch {
			if !w.spend {
				peek = append(peek[:0], state...)
				algo.StepInto(w.limit, peek, now, w.cost, &w.d)
				continue
			}
			next := algo.StepInto(w.limit, state, now, w.cost, &w.d)
			switch {
			case next != nil || w.d.CorruptState:
				state = next
				swap.Keep, swap.Value, swap.TTL = false, next, w.d.TTL
			case !w.d.Allowed && (swap.Keep || swap.Value != nil):
				// A denial spends nothing, but the store keeps the record
				// (the one it holds, or the one this batch writes) until
				// its caller is full again.
				swap.TTL = max(swap.TTL, w.d.Reset)
			}
		}
		f.swap[0] = swap
		ok, cur, err := p.cas(e, f.swap[:])
		if err != nil {
			// The outcome is unknown: forget the record, so the next
			// decision learns it from the store.
			p.remember(sh, k, nil, 0)
			fail(err)
			return
		}
		if ok {
			switch {
			case swap.Keep:
				if swap.TTL > 0 {
					kept = max(kept, addSat(now, swap.TTL))
				}
				p.remember(sh, k, expected, kept)
			case swap.TTL > 0:
				p.remember(sh, k, swap.Value, addSat(now, swap.TTL))
			default:
				p.remember(sh, k, nil, 0)
			}
			for _, w := range batch {
				if w.d.CorruptState {
					e.noteCorrupt(w.ns, w.key)
				}
			}
			return
		}
		expected, kept = cur[0], 0
		p.remember(sh, k, expected, 0)
		if attempt == p.retries {
			fail(ErrContention)
			return
		}
		backoff(attempt)
	}
}

// backoff waits before the next compare-and-swap after a conflict. The
// first conflict is retried at once: it is most often no contention at all,
// only a last-seen record this process did not have, and the retry expects
// the record the store just returned. Later ones wait a random time up to
// 25µs doubled per conflict, at most 2ms, so that processes contending for
// one key stop colliding in lockstep (callers arriving meanwhile join the
// key's queue, so the next commit carries more of them).
func backoff(attempt int) {
	if attempt == 0 {
		return
	}
	ceiling := min(25*time.Microsecond<<(attempt-1), 2*time.Millisecond)
	time.Sleep(rand.N(ceiling) + 1)
}

// applyAll is ApplyAll over the swap path: every key is stepped on its
// last-seen record and committed by one compare-and-swap over them all; a
// denial anywhere makes it a compare-only swap, so nothing is spent.
//
// Over a store whose keys fall in several groups (backend.Swapper's
// SwapGroup: Redis Cluster slots), no one swap can cover them. The groups are then first confirmed
// by compare-only swaps, one per group after the first, so that a denial
// any of them holds is found before anything is spent; then committed one
// group at a time, in the order of the requests. A group whose record
// changed since its confirmation is stepped again; if it now denies, the
// call is a denial but the groups already committed stay spent. That
// charges limits for a refused request only when another process spent a
// later group's key to denial within that round trip; it never admits
// more than every limit allows.
func (p *swapPath) applyAll(e *Engine, reqs []Request) ([]algo.Decision, bool, error) {
	if err := p.enter(e); err != nil {
		return nil, false, err
	}
	defer p.life.RUnlock()
	b := swapBatch{reqs: reqs, which: make([]int, len(reqs)), decisions: make([]algo.Decision, len(reqs))}
	var groups []string // each slot's group, and the distinct groups in order
	var order []string
	for j, r := range reqs {
		k := AppendKey(nil, r.Limit.Namespace, r.Key)
		b.which[j] = -1
		for s := range b.swaps {
			if string(b.swaps[s].Key) == string(k) {
				b.which[j] = s
			}
		}
		if b.which[j] < 0 {
			b.which[j] = len(b.swaps)
			b.swaps = append(b.swaps, backend.Swap{Key: k})
			b.slots = append(b.slots, swapSlot{sh: p.shard(k)})
			g := p.s.SwapGroup(k)
			groups = append(groups, g)
			if !slices.Contains(order, g) {
				order = append(order, g)
			}
		}
	}
	// A denial the last-seen records show is answered before queueing for
	// the keys, and again once they are owned: the callers before may have
	// spent them.
	if denied, err := p.deniedAllLocally(e, &b); denied || err != nil {
		if err != nil {
			return nil, false, err
		}
		return b.decisions, false, nil
	}
	// Own every key, in the order of their bytes so that two calls on
	// overlapping keys cannot each wait for the other.
	byKey := make([]int, len(b.slots))
	for s := range byKey {
		byKey[s] = s
	}
	slices.SortFunc(byKey, func(x, y int) int { return bytes.Compare(b.swaps[x].Key, b.swaps[y].Key) })
	owned := make([]*flight, len(b.slots))
	for _, s := range byKey {
		owned[s] = p.own(b.slots[s].sh, b.swaps[s].Key)
	}
	defer func() {
		for s, f := range owned {
			p.release(b.slots[s].sh, b.swaps[s].Key, f)
		}
	}()
	if denied, err := p.deniedAllLocally(e, &b); denied || err != nil {
		if err != nil {
			return nil, false, err
		}
		return b.decisions, false, nil
	}
	for s := range b.slots {
		seen := b.slots[s].sh.lastSeen(b.swaps[s].Key)
		b.slots[s].expected, b.slots[s].kept = seen.v, seen.kept
	}
	if len(order) == 1 {
		all, err := p.commit(e, &b, nil, true)
		if err != nil {
			return nil, false, err
		}
		return b.decisions, all, nil
	}
	members := make([][]int, len(order))
	for s, g := range groups {
		i := slices.Index(order, g)
		members[i] = append(members[i], s)
	}
	// A store error of one group's call names the request it concerns
	// first, so that a door counts it under that request's rule.
	fail := func(m []int, err error) error {
		for j, s := range b.which {
			if slices.Contains(m, s) {
				return &RequestError{Request: j, Err: err}
			}
		}
		return err
	}
	for _, m := range members[1:] {
		all, err := p.commit(e, &b, m, false)
		if err != nil {
			return nil, false, fail(m, err)
		}
		if !all {
			for _, m := range members[:1] {
				if _, err := p.commit(e, &b, m, false); err != nil {
					return nil, false, fail(m, err)
				}
			}
			return b.decisions, false, nil
		}
	}
	for i, m := range members {
		all, err := p.commit(e, &b, m, true)
		if err != nil {
			return nil, false, fail(m, err)
		}
		if !all {
			// Confirm what the remaining groups would answer; their
			// decisions are those of the compare-only swaps.
			for _, m := range members[i+1:] {
				if _, err := p.commit(e, &b, m, false); err != nil {
					return nil, false, fail(m, err)
				}
			}
			return b.decisions, false, nil
		}
	}
	return b.decisions, true, nil
}

// RequestError is an ApplyAll error that concerns some of its requests
// only: over a store whose keys fall in several groups (a Redis Cluster's
// slots), the call of one group failed. Request is the index of the first
// request of that group; errors.Is sees Err's sentinels (ErrStore).
type RequestError struct {
	Request int
	Err     error
}

// Error implements error.
func (e *RequestError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *RequestError) Unwrap() error { return e.Err }

// deniedAllLocally steps b's requests in order on the last-seen records of
// their keys, spending nothing, and reports whether one of them is denied
// and every denial is one deniedLocally would answer alone: then the call
// is answered from
// those decisions, with no round trip (the others' say what they would
// have answered on the records last seen). Otherwise b.decisions are left
// zero.
func (p *swapPath) deniedAllLocally(e *Engine, b *swapBatch) (bool, error) {
	if p.confirm {
		return false, nil
	}
	now, err := p.now(e)
	if err != nil {
		return false, e.storeError("swap", err)
	}
	if now < p.latest.Load() {
		return false, nil // see deniedLocally
	}
	seen := make([]seenRecord, len(b.slots))
	states := make([][]byte, len(b.slots))
	for s := range b.slots {
		seen[s] = p.current(b.slots[s].sh.lastSeen(b.swaps[s].Key), now)
		if seen[s].v != nil {
			states[s] = append([]byte(nil), seen[s].v...)
		}
	}
	local := false
	for j, r := range b.reqs {
		s, d := b.which[j], &b.decisions[j]
		next := algo.StepInto(r.Limit.Algorithm, states[s], now, r.Cost, d)
		if d.CorruptState {
			local = false
			break
		}
		if next != nil {
			states[s] = next
		}
		if !d.Allowed {
			if seen[s].v == nil || addSat(now, d.Reset) > seen[s].kept {
				// This denial is the store's to keep (see seenRecord).
				local = false
				break
			}
			local = true
		}
	}
	if !local {
		clear(b.decisions)
		return false, nil
	}
	p.localDenials.Add(1)
	return true, nil
}

// swapBatch is one ApplyAll's keys and decisions over the swap path: one
// slot and one swap per distinct key.
type swapBatch struct {
	reqs      []Request
	which     []int // reqs[j] is on slot which[j]
	slots     []swapSlot
	swaps     []backend.Swap
	decisions []algo.Decision
}

type swapSlot struct {
	sh       *swapShard
	expected []byte        // the record the swap expects
	kept     int64         // until when the store keeps expected (seenRecord.kept)
	state    []byte        // the record as the requests step it
	keep     time.Duration // the longest wait a denial on it told its caller
}

// commit steps the requests on the slots named (all of them when slots is
// nil) on their expected records and sends one compare-and-swap over them:
// writing the stepped records when write is set and every request is
// allowed, else comparing only. On a mismatch it steps again on the
// store's records, at most p.retries times. It reports whether every
// request was allowed; their decisions are in b.decisions.
func (p *swapPath) commit(e *Engine, b *swapBatch, slots []int, write bool) (bool, error) {
	if slots == nil {
		slots = make([]int, len(b.slots))
		for s := range slots {
			slots[s] = s
		}
	}
	swaps := make([]backend.Swap, len(slots))
	for attempt := 0; ; attempt++ {
		now, err := p.now(e)
		if err != nil {
			return false, e.storeError("swap", err)
		}
		for _, s := range slots {
			sl := &b.slots[s]
			cur := p.current(seenRecord{sl.expected, sl.kept}, now)
			sl.expected, sl.kept = cur.v, cur.kept
			sl.state, sl.keep = nil, 0
			if sl.expected != nil {
				sl.state = append([]byte(nil), sl.expected...)
			}
			b.swaps[s] = backend.Swap{Key: b.swaps[s].Key, Expected: sl.expected, Keep: true}
		}
		all, corrupt := true, false
		for j, r := range b.reqs {
			s := b.which[j]
			if !slices.Contains(slots, s) {
				continue
			}
			d := &b.decisions[j]
			next := algo.StepInto(r.Limit.Algorithm, b.slots[s].state, now, r.Cost, d)
			all = all && d.Allowed
			corrupt = corrupt || d.CorruptState
			if next != nil || d.CorruptState {
				b.slots[s].state = next
				b.swaps[s].Keep, b.swaps[s].Value, b.swaps[s].TTL = false, next, d.TTL
			} else if !d.Allowed && b.swaps[s].Keep {
				// Denied on the record the store holds (no request
				// before it in the call stepped it): kept until its
				// caller is full again, should nothing be written.
				b.slots[s].keep = max(b.slots[s].keep, d.Reset)
			}
		}
		for i, s := range slots {
			if !all || !write {
				// A comparison only: nothing spent, and the record kept
				// until a denied caller is full again (see seenRecord).
				b.swaps[s].Keep, b.swaps[s].TTL = true, b.slots[s].keep
			}
			swaps[i] = b.swaps[s]
		}
		ok, cur, err := p.cas(e, swaps)
		if err != nil {
			for _, s := range slots {
				p.remember(b.slots[s].sh, b.swaps[s].Key, nil, 0)
			}
			return false, e.storeError("swap", err)
		}
		if ok {
			for _, s := range slots {
				sl, w := &b.slots[s], &b.swaps[s]
				v, kept := sl.expected, sl.kept
				switch {
				case w.Keep && w.TTL > 0:
					kept = max(kept, addSat(now, w.TTL))
				case !w.Keep:
					v, kept = nil, 0
					if w.TTL > 0 {
						v, kept = w.Value, addSat(now, w.TTL)
					}
				}
				sl.expected, sl.kept = v, kept
				p.remember(sl.sh, w.Key, v, kept)
			}
			if corrupt {
				e.noteCorrupt("", "")
			}
			return all, nil
		}
		for i, s := range slots {
			b.slots[s].expected, b.slots[s].kept = cur[i], 0
			p.remember(b.slots[s].sh, b.swaps[s].Key, cur[i], 0)
		}
		if attempt == p.retries {
			return false, e.storeError("swap", ErrContention)
		}
		backoff(attempt)
	}
}

// reset deletes k's record from the store and forgets the last-seen one.
func (p *swapPath) reset(e *Engine, k []byte) error {
	if err := p.enter(e); err != nil {
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

func errorf(format string, a ...any) error {
	return fmt.Errorf("sluice/engine: "+format, a...)
}
