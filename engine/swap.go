package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
)

// Defaults for the swap path's options.
const (
	DefaultSwapRetries   = 8
	DefaultSwapCacheSize = 1 << 16
)

// swapPath is the engine over a backend.Swapper, a store that cannot lend a
// lock. It keeps the last record it saw per key, steps it locally and
// commits by compare-and-swap; on a mismatch it steps again on the record
// the store returned. Callers deciding on one key at once form a queue: one
// of them, the leader, steps every queued request one after another on the
// key's record and commits them all with one compare-and-swap, then hands
// the queue that formed meanwhile to the next leader.
//
// A decision that spends nothing (a denial, a peek) is confirmed by a
// compare-only swap (backend.Swap.Keep) rather than answered from the
// last-seen record: that record may be stale, and though a record only moves
// towards "more spent" except by time (so a denial on a stale record is
// still a denial), its Remaining and RetryAfter would be those of the stale
// record, and a Reset by another process would go unseen. A queue mixing
// spending and denials costs one round trip in all.
type swapPath struct {
	s        backend.Swapper
	retries  int
	perShard int // the last-seen records kept per shard
	shards   []swapShard
	mask     uint64

	offset atomic.Int64 // the store's clock minus the engine's, once timed
	timed  atomic.Bool  // offset has been learned (or the store has no clock)

	life sync.RWMutex // read-held by every call, so close can wait for them
	shut bool         // set by close; guarded by life

	swaps, conflicts atomic.Uint64
}

// swapShard holds the queues and last-seen records of the keys hashing to
// it.
type swapShard struct {
	mu      sync.Mutex         // guards flights and seen
	flights map[string]*flight // the keys with a leader at work
	seen    map[string][]byte  // the last record seen per key (nil: absent); bounded by perShard
	_       [40]byte           // keep neighbouring shards' locks off one cache line
}

// flight is one key's queue of callers waiting for the leader's next
// commit.
type flight struct {
	queue []*waiter
}

// waiter is one caller's request in a flight.
type waiter struct {
	limit algo.Algorithm
	ns    string
	key   string
	cost  int64
	spend bool
	d     algo.Decision // the decision, or zero with err
	err   error
	wake  chan bool // receives true to lead the next batch, false once decided
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
	p := &swapPath{s: s, retries: retries, perShard: max(1, (size+n-1)/n), shards: make([]swapShard, n), mask: uint64(n - 1)}
	for i := range p.shards {
		p.shards[i].flights = map[string]*flight{}
		p.shards[i].seen = map[string][]byte{}
	}
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
	if storeNow != 0 {
		p.offset.Store(storeNow - e.now())
	}
	p.timed.Store(true)
	if !ok {
		p.conflicts.Add(1)
		if len(cur) != len(swaps) {
			return false, nil, errorf("compare-and-swap returned %d records for %d keys", len(cur), len(swaps))
		}
	}
	return ok, cur, nil
}

func (p *swapPath) shard(k []byte) *swapShard { return &p.shards[xxhash.Sum64(k)&p.mask] }

// lastSeen returns the record last seen under k, and whether there is one
// (a miss is treated as an absent record: right for a key's first request,
// and otherwise corrected by one mismatch).
func (sh *swapShard) lastSeen(k []byte) []byte {
	sh.mu.Lock()
	v := sh.seen[string(k)]
	sh.mu.Unlock()
	return v
}

// remember keeps v as the record last seen under k, making room by
// forgetting another key's when the shard holds perShard already: a
// forgotten record costs a round trip, never a wrong decision.
func (p *swapPath) remember(sh *swapShard, k, v []byte) {
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
	sh.seen[string(k)] = v
}

// apply decides one request through the key's queue.
func (p *swapPath) apply(e *Engine, l Limit, key string, cost int64, spend bool, d *algo.Decision) error {
	if err := p.enter(e); err != nil {
		return err
	}
	defer p.life.RUnlock()
	k := AppendKey(nil, l.Namespace, key)
	sh := p.shard(k)
	// The waiter has its own decision, copied out at the end: a pointer to
	// the caller's would move it to the heap on every path.
	w := &waiter{limit: l.Algorithm, ns: l.Namespace, key: key, cost: cost, spend: spend}
	sh.mu.Lock()
	f := sh.flights[string(k)]
	if f == nil {
		f = &flight{queue: []*waiter{w}}
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

// lead decides the queued requests of k as one batch, hands the queue that
// formed meanwhile to its first caller, and wakes the batch's callers.
func (p *swapPath) lead(e *Engine, sh *swapShard, k []byte, f *flight, self *waiter) {
	sh.mu.Lock()
	batch := f.queue
	f.queue = nil
	sh.mu.Unlock()

	p.decide(e, sh, k, batch)

	sh.mu.Lock()
	var next *waiter
	if len(f.queue) == 0 {
		delete(sh.flights, string(k))
	} else {
		next = f.queue[0]
	}
	sh.mu.Unlock()
	for _, w := range batch {
		if w != self {
			w.wake <- false
		}
	}
	if next != nil {
		next.wake <- true
	}
}

// decide steps the batch's requests in order on k's record and commits the
// outcome with one compare-and-swap, stepping again on the store's record
// after a mismatch, at most p.retries times.
func (p *swapPath) decide(e *Engine, sh *swapShard, k []byte, batch []*waiter) {
	expected := sh.lastSeen(k)
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
			if next != nil || w.d.CorruptState {
				state = next
				swap.Keep, swap.Value, swap.TTL = false, next, w.d.TTL
			}
		}
		ok, cur, err := p.cas(e, []backend.Swap{swap})
		if err != nil {
			// The outcome is unknown: forget the record, so the next
			// decision learns it from the store.
			p.remember(sh, k, nil)
			fail(err)
			return
		}
		if ok {
			switch {
			case swap.Keep:
				p.remember(sh, k, expected)
			case swap.TTL > 0:
				p.remember(sh, k, swap.Value)
			default:
				p.remember(sh, k, nil)
			}
			for _, w := range batch {
				if w.d.CorruptState {
					e.noteCorrupt(w.ns, w.key)
				}
			}
			return
		}
		expected = cur[0]
		p.remember(sh, k, expected)
		if attempt == p.retries {
			fail(ErrContention)
			return
		}
	}
}

// applyAll is ApplyAll over the swap path: every key is stepped on its
// last-seen record and committed by one compare-and-swap over them all; a
// denial anywhere makes it a compare-only swap, so nothing is spent.
func (p *swapPath) applyAll(e *Engine, reqs []Request) ([]algo.Decision, bool, error) {
	if err := p.enter(e); err != nil {
		return nil, false, err
	}
	defer p.life.RUnlock()
	type slot struct {
		sh       *swapShard
		expected []byte
		state    []byte
	}
	var (
		slots []slot
		swaps []backend.Swap
	)
	which := make([]int, len(reqs))
	for j, r := range reqs {
		k := AppendKey(nil, r.Limit.Namespace, r.Key)
		which[j] = -1
		for s := range swaps {
			if string(swaps[s].Key) == string(k) {
				which[j] = s
			}
		}
		if which[j] < 0 {
			which[j] = len(swaps)
			sh := p.shard(k)
			swaps = append(swaps, backend.Swap{Key: k})
			slots = append(slots, slot{sh: sh, expected: sh.lastSeen(k)})
		}
	}
	decisions := make([]algo.Decision, len(reqs))
	for attempt := 0; ; attempt++ {
		now, err := p.now(e)
		if err != nil {
			return nil, false, e.storeError("swap", err)
		}
		for s := range slots {
			sl := &slots[s]
			sl.state = nil
			if sl.expected != nil {
				sl.state = append([]byte(nil), sl.expected...)
			}
			swaps[s] = backend.Swap{Key: swaps[s].Key, Expected: sl.expected, Keep: true}
		}
		all, corrupt := true, false
		for j, r := range reqs {
			s := which[j]
			next := algo.StepInto(r.Limit.Algorithm, slots[s].state, now, r.Cost, &decisions[j])
			all = all && decisions[j].Allowed
			if decisions[j].CorruptState {
				corrupt = true
			}
			if next != nil || decisions[j].CorruptState {
				slots[s].state = next
				swaps[s].Keep, swaps[s].Value, swaps[s].TTL = false, next, decisions[j].TTL
			}
		}
		if !all {
			for s := range swaps {
				swaps[s].Keep = true
			}
		}
		ok, cur, err := p.cas(e, swaps)
		if err != nil {
			for s := range slots {
				p.remember(slots[s].sh, swaps[s].Key, nil)
			}
			return nil, false, e.storeError("swap", err)
		}
		if ok {
			for s := range slots {
				v := slots[s].expected
				if !swaps[s].Keep {
					v = nil
					if swaps[s].TTL > 0 {
						v = swaps[s].Value
					}
				}
				p.remember(slots[s].sh, swaps[s].Key, v)
			}
			if corrupt {
				e.noteCorrupt("", "")
			}
			return decisions, all, nil
		}
		for s := range slots {
			slots[s].expected = cur[s]
			p.remember(slots[s].sh, swaps[s].Key, cur[s])
		}
		if attempt == p.retries {
			return nil, false, e.storeError("swap", ErrContention)
		}
	}
}

// reset deletes k's record from the store and forgets the last-seen one.
func (p *swapPath) reset(e *Engine, k []byte) error {
	if err := p.enter(e); err != nil {
		return err
	}
	defer p.life.RUnlock()
	sh := p.shard(k)
	p.remember(sh, k, nil)
	if err := p.s.Delete(k); err != nil {
		return e.storeError("delete", err)
	}
	// A decision in flight may have remembered the record just deleted;
	// that would cost it a mismatch, but forgetting it again is free.
	p.remember(sh, k, nil)
	return nil
}

func errorf(format string, a ...any) error {
	return fmt.Errorf("sluice/engine: "+format, a...)
}
