package redis

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Defaults of the circuit breaker (Options.Breaker*).
const (
	DefaultBreakerWindow      = time.Second
	DefaultBreakerMinCalls    = 20
	DefaultBreakerFailureRate = 0.5
)

// breakerBuckets is how many slices the breaker's window is judged in: a
// failure leaves the judgement one slice (a tenth of the window) after the
// window has passed it.
const breakerBuckets = 10

// breaker is the circuit breaker. Closed, every call goes to Redis, and
// each one's outcome is counted in the bucket of the slice of time it ended
// in, weighed as the keys it swapped (a batch of single-key swaps, or a
// compare-and-swap over several keys, counts as that many calls: each is a
// decision Redis served or failed). It opens when, over the last window, at least minCalls calls ended
// and at least rate of them failed: an error rate with a volume, so that
// neither one stall of a moment (a few calls in flight failing together)
// nor a streak on a quiet gateway opens it. Open, one call at a time, the
// probe, goes to Redis; the calls made meanwhile wait for its answer (at
// most its deadline): its success closes the breaker (and forgets the
// window) and they go on to Redis, its failure fails them with
// ErrUnavailable and lets the next call probe. So a Redis that comes back
// is noticed by the first call it answers, not after a cooldown, and no
// call is refused once it has answered; a Redis that does not answer sees
// one call at a time, and every decision still ends within its deadline.
type breaker struct {
	off      bool  // never opens
	minCalls int64 // calls in the window before it is judged
	rate     float64
	slice    int64 // ns: the window divided by breakerBuckets

	buckets [breakerBuckets]bucket
	open    atomic.Bool

	mu      sync.Mutex    // guards probing and probed
	probing bool          // a probe is out
	probed  chan struct{} // closed when the probe out is answered

	opened, rejected, failures, calls atomic.Uint64

	changed func(open bool) // Options.BreakerChanged; nil: none
}

// bucket counts the calls that ended in one slice of time.
type bucket struct {
	epoch        atomic.Int64 // the slice's number: Unix ns / slice
	calls, fails atomic.Int64
}

// init sets the breaker's parameters from o.
func (b *breaker) init(o *Options) {
	b.minCalls, b.rate, b.slice = int64(o.BreakerMinCalls), o.BreakerFailureRate, int64(o.BreakerWindow)/breakerBuckets
	b.off = b.minCalls < 0
	b.changed = o.BreakerChanged
	if b.minCalls == 0 {
		b.minCalls = DefaultBreakerMinCalls
	}
	if b.rate == 0 {
		b.rate = DefaultBreakerFailureRate
	}
	if b.slice == 0 {
		b.slice = int64(DefaultBreakerWindow) / breakerBuckets
	}
}

// allow reports whether a call may go to Redis; a true answer must be
// followed by done. While open, only the probe may: a call made while the
// probe is out waits for its answer (at most the probe's deadline) and
// goes to Redis if the probe closed the breaker, else fails.
func (b *breaker) allow() (probe bool, ok bool) {
	if b.off || !b.open.Load() {
		return false, true
	}
	b.mu.Lock()
	if !b.probing {
		b.probing, b.probed = true, make(chan struct{})
		b.mu.Unlock()
		return true, true
	}
	probed := b.probed
	b.mu.Unlock()
	<-probed
	if !b.open.Load() {
		return false, true
	}
	b.rejected.Add(1)
	return false, false
}

// done counts the outcome of a call allow let through.
func (b *breaker) done(probe bool, err error) { b.doneN(probe, err, 1) }

// doneN counts the outcome of a call allow let through that carried n
// decisions (a batch): it weighs as n calls.
func (b *breaker) doneN(probe bool, err error, n int64) {
	b.calls.Add(uint64(n))
	failed := isFailure(err)
	if failed {
		b.failures.Add(uint64(n))
	}
	if b.off {
		return
	}
	if probe {
		closed := false
		if !failed {
			b.reset()
			closed = b.open.Swap(false)
		}
		b.mu.Lock()
		b.probing = false
		close(b.probed)
		b.mu.Unlock()
		if closed && b.changed != nil {
			b.changed(false) // once the callers waiting on the probe go on
		}
		return
	}
	now := time.Now().UnixNano()
	epoch := now / b.slice
	bk := &b.buckets[epoch%breakerBuckets]
	if e := bk.epoch.Load(); e != epoch && bk.epoch.CompareAndSwap(e, epoch) {
		// A slice a whole window old: start it afresh. Calls of the new
		// slice counted by others between the swap and these stores are
		// lost, which only makes the judgement a little later.
		bk.calls.Store(0)
		bk.fails.Store(0)
	}
	bk.calls.Add(n)
	if !failed {
		return
	}
	bk.fails.Add(n)
	if b.open.Load() {
		return
	}
	var calls, fails int64
	for i := range b.buckets {
		if e := b.buckets[i].epoch.Load(); e > epoch-breakerBuckets && e <= epoch {
			calls += b.buckets[i].calls.Load()
			fails += b.buckets[i].fails.Load()
		}
	}
	if calls >= b.minCalls && float64(fails) >= b.rate*float64(calls) && b.open.CompareAndSwap(false, true) {
		b.opened.Add(1)
		if b.changed != nil {
			b.changed(true)
		}
	}
}

// abandon ends a call allow let through that the caller gave up on before
// Redis answered: it counts nothing, and a probe so ended leaves the
// breaker open for the next call to probe again.
func (b *breaker) abandon(probe bool) {
	if b.off || !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	close(b.probed)
	b.mu.Unlock()
}

// reset forgets the window's counts.
func (b *breaker) reset() {
	for i := range b.buckets {
		b.buckets[i].epoch.Store(0)
		b.buckets[i].calls.Store(0)
		b.buckets[i].fails.Store(0)
	}
}

// isFailure reports an error that says Redis did not serve a call: a time
// out, a lost or refused connection, or an error reply meaning that the
// server cannot serve now. Any other error reply is an answer.
func isFailure(err error) bool {
	return err != nil && !errors.Is(err, goredis.Nil) && (!isReply(err) || isTransient(err))
}

// BreakerStats are the circuit breaker's state and counts since the store
// was opened.
type BreakerStats struct {
	// Open reports that calls fail at once with ErrUnavailable, but for
	// one probe at a time.
	Open bool
	// Opened counts the times the breaker opened.
	Opened uint64
	// Rejected counts the calls answered ErrUnavailable without calling
	// Redis.
	Rejected uint64
	// Calls counts the calls that went to Redis; Failures those of them
	// that failed (a time out, a lost connection, a server that cannot
	// serve).
	Calls, Failures uint64
}

// Breaker returns the circuit breaker's state and counts.
func (s *Store) Breaker() BreakerStats {
	b := &s.brk
	return BreakerStats{Open: b.open.Load(), Opened: b.opened.Load(), Rejected: b.rejected.Load(), Calls: b.calls.Load(), Failures: b.failures.Load()}
}

// isReply reports an error reply from Redis.
func isReply(err error) bool {
	var reply goredis.Error
	return errors.As(err, &reply)
}

// isTransient reports an error reply that means the server cannot serve
// now (loading, a Cluster moving slots or without a majority).
func isTransient(err error) bool {
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN"} {
		if goredis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
