package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
)

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
	ctx   context.Context // the caller's; nil for an ApplyAll waiting to own the key
	limit algo.Algorithm
	ns    string
	key   string
	cost  int64
	spend bool
	// settle, when not settleNone, makes the waiter a settle rather than a
	// request: it charges cost, or refunds cost spent at at, and reports
	// the units it did in settled.
	settle  settleKind
	at      int64 // a refund's instant; for a spending request, the time it was stepped at
	settled int64
	d       algo.Decision // the decision, or zero with err
	err     error
	wake    chan bool // receives true to lead the next batch (or, multi, to own the key), false once decided
	// multi marks an ApplyAll waiting to own the key: it is no part of a
	// leader's batch, and is woken, off the queue, once the batch before
	// it is done.
	multi bool
	// chosen marks the waiter release woke to lead the next batch: it
	// may no longer leave the queue. Guarded by the shard's mutex.
	chosen bool
	call   *multiCall // the ApplyAll a multi waiter is, when a leader may adopt it
	buf    [64]byte   // deniedLocally's copy of the last-seen record
}

// apply decides one request through the key's queue.
func (p *swapPath) apply(ctx context.Context, e *Engine, l Limit, key string, cost int64, spend bool, d *algo.Decision) error {
	_, err := p.applyAt(ctx, e, l, key, cost, spend, d)
	return err
}

// applyAt is apply returning the store's time the request was stepped at
// when it spent (zero when it did not).
func (p *swapPath) applyAt(ctx context.Context, e *Engine, l Limit, key string, cost int64, spend bool, d *algo.Decision) (int64, error) {
	if err := p.enter(ctx, e); err != nil {
		return 0, err
	}
	defer p.life.RUnlock()
	k := AppendKey(make([]byte, 0, binary.MaxVarintLen64+len(l.Namespace)+len(key)), l.Namespace, key)
	sh := p.shard(k)
	// The waiter has its own decision, copied out at the end: a pointer to
	// the caller's would move it to the heap on every path.
	w := &waiter{ctx: ctx, limit: l.Algorithm, ns: l.Namespace, key: key, cost: cost, spend: spend}
	if spend && !p.confirm {
		denied, err := p.deniedLocally(ctx, e, sh, k, l.Algorithm, cost, d, w.buf[:0])
		if denied || err != nil {
			return 0, err
		}
	}
	err := p.queue(ctx, e, sh, k, w, d)
	return w.at, err
}

// queue decides w through k's queue: it joins the queue, and leads the
// next batch when its turn comes.
func (p *swapPath) queue(ctx context.Context, e *Engine, sh *swapShard, k []byte, w *waiter, d *algo.Decision) error {
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
		lead, err := p.wait(ctx, sh, f, w)
		if err != nil {
			return err
		}
		if !lead {
			*d = w.d
			return w.err
		}
	}
	p.lead(e, sh, k, f, w)
	*d = w.d
	return w.err
}

// wait waits for w's turn in f's queue: to lead the next batch (true) or
// to be answered (false). When ctx ends first and w is still queued, not
// taken into a batch nor chosen to lead one, w leaves the queue and wait
// returns an error wrapping ctx's: nothing was spent. Otherwise the
// caller waits for the batch it is in, which its ctx no longer bounds.
func (p *swapPath) wait(ctx context.Context, sh *swapShard, f *flight, w *waiter) (bool, error) {
	done := ctx.Done()
	if done == nil {
		return <-w.wake, nil
	}
	select {
	case lead := <-w.wake:
		return lead, nil
	case <-done:
	}
	sh.mu.Lock()
	if i := slices.Index(f.queue, w); i >= 0 && !w.chosen {
		f.queue = slices.Delete(f.queue, i, i+1)
		sh.mu.Unlock()
		return false, errorf("swap: %w", ctx.Err())
	}
	sh.mu.Unlock()
	return <-w.wake, nil
}

// deniedLocally steps the record last seen under k, without spending, and
// reports whether it denies the request: the store's record, at least as
// spent, would deny it too, so the denial is answered with no round trip.
// A key with no last-seen record is not denied here. buf is room for the
// copy the step writes in place.
func (p *swapPath) deniedLocally(ctx context.Context, e *Engine, sh *swapShard, k []byte, a algo.Algorithm, cost int64, d *algo.Decision, buf []byte) (bool, error) {
	sh.mu.Lock()
	rec, ok := sh.seen[string(k)]
	state := append(buf, rec.v...) // the step writes in place
	sh.mu.Unlock()
	if !ok {
		return false, nil
	}
	now, err := p.now(ctx, e)
	if err != nil {
		return false, e.swapError(ctx, err)
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

	if err := p.decide(e, sh, k, f, batch); err != nil {
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
	} else {
		next.chosen = true
	}
	sh.mu.Unlock()
	next.wake <- true
}

// own makes the caller the owner of k's queue, as a leader is, waiting its
// turn behind the callers already queued: while it owns the key no other
// caller in the process decides on it, so that an ApplyAll's
// compare-and-swap never conflicts with this process' own. It must be
// followed by release, unless the owner of k adopted call meanwhile
// (commitGroup) and decided it: then own returns nil, and call holds the
// answer.
func (p *swapPath) own(sh *swapShard, k []byte, call *multiCall) *flight {
	sh.mu.Lock()
	f := sh.flights[string(k)]
	if f == nil {
		f = flights.Get().(*flight)
		sh.flights[string(k)] = f
		sh.mu.Unlock()
		return f
	}
	w := &waiter{multi: true, call: call, wake: make(chan bool, 1)}
	f.queue = append(f.queue, w)
	sh.mu.Unlock()
	if own := <-w.wake; !own {
		return nil
	}
	return f
}

// decide steps the batch's requests in order on k's record and commits the
// outcome with one compare-and-swap, stepping again on the store's record
// after a mismatch, at most p.retries times. A caller whose context has
// ended is answered an error wrapping it and left out; the swap is sent
// under the context of the one caller left, or under the callers' shared
// context (sharedCtx). It returns the store's error when the store failed
// the call (not for a conflict, nor for the caller's context ending).
func (p *swapPath) decide(e *Engine, sh *swapShard, k []byte, f *flight, batch []*waiter) error {
	batch = live(batch)
	if len(batch) == 0 {
		return nil
	}
	ctx := batch[0].ctx
	if len(batch) > 1 {
		var cancel context.CancelFunc
		ctx, cancel = sharedCtx(func(yield func(context.Context) bool) {
			for _, w := range batch {
				if !yield(w.ctx) {
					return
				}
			}
		})
		defer cancel()
	}
	seen := sh.lastSeen(k)
	expected, kept := seen.v, seen.kept
	var peek []byte
	fail := func(err error) error {
		if err == ErrContention {
			err = e.storeError("swap", err)
		} else {
			err = e.swapError(ctx, err)
		}
		for _, w := range batch {
			w.d, w.err = algo.Decision{}, err
		}
		if errors.Is(err, ErrStore) && !errors.Is(err, ErrContention) {
			return err
		}
		return nil
	}
	for attempt := 0; ; attempt++ {
		now, err := p.now(ctx, e)
		if err != nil {
			return fail(err)
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
			if w.settle != settleNone {
				var next []byte
				if w.settle == settleCharge {
					next, w.settled = algo.Charge(w.limit, state, now, w.cost, &w.d)
				} else {
					next, w.settled = algo.Refund(w.limit, state, now, w.at, w.cost, &w.d)
					swap.Announce = swap.Announce || w.settled > 0
				}
				if next != nil || w.d.CorruptState {
					state = next
					swap.Keep, swap.Value, swap.TTL = false, next, w.d.TTL
				}
				continue
			}
			w.at = now
			if !w.spend {
				peek = append(peek[:0], state...)
				algo.StepInto(w.limit, peek, now, w.cost, &w.d)
				continue
			}
			next := algo.StepInto(w.limit, state, now, w.cost, &w.d)
			w.at = spentAt(w.limit, now, true, next)
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
		ok, cur, err := p.cas(ctx, e, f.swap[:])
		if err != nil {
			// The outcome is unknown: forget the record, so the next
			// decision learns it from the store.
			p.remember(sh, k, nil, 0)
			return fail(err)
		}
		if ok {
			v, kept := p.committed(swap, expected, kept, now)
			p.remember(sh, k, v, kept)
			for _, w := range batch {
				if w.d.CorruptState {
					e.noteCorrupt(w.ns, w.key)
				}
			}
			return nil
		}
		expected, kept = cur[0], 0
		p.remember(sh, k, expected, 0)
		if attempt == p.retries {
			return fail(ErrContention)
		}
		// Retried at once, on the record the conflict returned: it is
		// the freshest this process can have, and a wait would only age
		// it. A process keeps one flight per key, so a hot key sees at
		// most one compare-and-swap in flight per process, and each
		// round of conflicts commits someone's. A wait here starved the
		// process that lost: the winners' next flights, which never
		// wait, found the key first again (three processes sharing a
		// concurrency limit on one key ran out of the default retries
		// in 9 runs of 10 with a wait up to 2ms, 3 of 10 with 25µs, none
		// with none).
	}
}

// live answers the waiters of batch whose context has ended an error
// wrapping it (nothing is spent for them) and returns the others: batch
// itself when none has ended.
func live(batch []*waiter) []*waiter {
	for i, w := range batch {
		if w.ctx.Err() == nil {
			continue
		}
		out := append(make([]*waiter, 0, len(batch)-1), batch[:i]...)
		for _, w := range batch[i:] {
			if err := w.ctx.Err(); err != nil {
				w.d, w.err = algo.Decision{}, errorf("swap: %w", err)
				continue
			}
			out = append(out, w)
		}
		return out
	}
	return batch
}

// backoff waits before the next compare-and-swap of several keys
// (ApplyAll's paths) after a conflict; a key's queue retries at once (see
// decide). The first conflict is retried at once: it is most often no contention at all,
// only a last-seen record this process did not have, and the retry expects
// the record the store just returned. Later ones wait a random time up to
// 25µs doubled per conflict, at most 2ms, so that processes contending for
// one key stop colliding in lockstep (callers arriving meanwhile join the
// key's queue, so the next commit carries more of them).
func backoff(attempt int) {
	if attempt == 0 {
		return
	}
	// The doubling stops at 2ms; the shift is capped first, so that a
	// large attempt (Retries may be set high) cannot overflow it.
	ceiling := min(25*time.Microsecond<<min(attempt-1, 7), 2*time.Millisecond)
	time.Sleep(rand.N(ceiling) + 1)
}
