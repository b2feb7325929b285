package algo

import (
	"time"

	"github.com/sluice-go/sluice/codec"
)

// Settling a cost known only after the request: a caller reserves an
// estimate with an ordinary step, and once the actual cost is known either
// charges the difference (Charge) or refunds it (Refund).
//
// A charge is not a request: it is never denied, and may take the caller
// past its capacity into debt, which every later step sees (a request is
// denied until the debt has refilled, and its RetryAfter says when). Debt
// is bounded: a charge adds at most what brings what the record holds as
// spent to twice the capacity, so a caller owes at most one capacity more
// than it has (for the sliding log, whose record keeps one entry per unit,
// that also caps what one charge adds: at most twice the capacity of
// entries). What the bound leaves out is not charged, and Charge says how
// much was.
//
// A refund takes back units spent at a given instant where the algorithm
// can take them back exactly, and nothing else, so that what a caller
// spent never reads as less than the sum of its actual costs:
//
//   - token_bucket, leaky_bucket, gcra: what of the units has not refilled
//     (or drained) since the instant. The bucket has been refilling since
//     the units were spent; a bucket that was full meanwhile stopped
//     refilling, and what it would have refilled beyond full cannot be told
//     from what it refilled for the units, so the refund counts every
//     moment since as refilling them: n less what the rate restores in that
//     time (to the nano-token, to the nanosecond for gcra; the units
//     reported are the whole ones), and never more than is spent, so that
//     nobody is lifted above capacity. A refund settled at once gives back
//     all n; one settled when the rate has had time to restore n units,
//     nothing (n units take n·window/limit). (What the bucket held at the
//     admission, less the refill since, would bound the units still there
//     more tightly, but not safely: a reservation admitted before, and
//     refunded since, lowers after the fact what the bucket held, and that
//     bound then gives back more than the actual costs allow.) The
//     window algorithms refund exactly however long the request took,
//     within its window: the better choice for costs settled after long
//     requests.
//   - fixed_window, sliding_counter: the units, when the instant falls in
//     the current window (never into a window that has passed, whose count
//     has become the previous one or is gone), at most the window's count.
//   - sliding_log: up to n of the entries made at exactly that instant
//     (SpentAt tells it for an admission) while they are live; none once
//     they have aged out.
//
// Both are pure functions on the record, as a step is: zero allocations on
// the fixed-size records (all but the sliding log's), and no panic on any
// bytes: a record that does not decode is absent (a refund then takes
// nothing back, a charge starts a fresh record) and the decision reports it
// as CorruptState.

// Settler is implemented by an Algorithm that can settle costs after the
// request: every algorithm of this package. Charge and Refund call it for an
// Algorithm of another package's making; one that does not implement it
// settles nothing.
type Settler interface {
	// ChargeInto charges n more units at now, even past the capacity
	// (see Charge).
	ChargeInto(state []byte, now, n int64, d *Decision) (next []byte, charged int64)
	// RefundInto takes back up to n units spent at the instant at (see
	// Refund).
	RefundInto(state []byte, now, at, n int64, d *Decision) (next []byte, refunded int64)
}

// Charge charges n more units to the record state at now (Unix
// nanoseconds), even past a's capacity, up to its debt bound (see the
// package doc's settling). It returns the record to store (nil when it need
// not change: nothing was charged) and the units charged, at most n, and
// writes to *d the key's state after the charge: Allowed true and
// RetryAfter zero (a charge is not a request), Limit, Remaining (zero in
// debt), Reset and TTL. Like a step, next may share state's backing array.
func Charge(a Algorithm, state []byte, now, n int64, d *Decision) (next []byte, charged int64) {
	switch a := a.(type) {
	case *TokenBucket:
		return a.ChargeInto(state, now, n, d)
	case *GCRA:
		return a.ChargeInto(state, now, n, d)
	case *LeakyBucket:
		return a.ChargeInto(state, now, n, d)
	case *FixedWindow:
		return a.ChargeInto(state, now, n, d)
	case *SlidingCounter:
		return a.ChargeInto(state, now, n, d)
	case *SlidingLog:
		return a.ChargeInto(state, now, n, d)
	case *Concurrency:
		return a.ChargeInto(state, now, n, d)
	}
	next, charged, *d = chargeOther(a, state, now, n)
	return next, charged
}

// chargeOther and refundOther are Charge and Refund for an Algorithm of
// another package's making. They return the decision rather than take d,
// which would then escape to the heap on every path (see stepOther).
var (
	chargeOther = func(a Algorithm, state []byte, now, n int64) ([]byte, int64, Decision) {
		var d Decision
		if s, ok := a.(Settler); ok {
			next, k := s.ChargeInto(state, now, n, &d)
			return next, k, d
		}
		return nil, 0, Decision{Allowed: true, Limit: a.Params().Capacity()}
	}
	refundOther = func(a Algorithm, state []byte, now, at, n int64) ([]byte, int64, Decision) {
		var d Decision
		if s, ok := a.(Settler); ok {
			next, k := s.RefundInto(state, now, at, n, &d)
			return next, k, d
		}
		return nil, 0, Decision{Allowed: true, Limit: a.Params().Capacity()}
	}
)

// Refund takes back up to n units spent at the instant at (Unix
// nanoseconds; a time after now counts as now) from the record state at
// now, where a can take them back exactly (see the package doc's
// settling). It returns the record to store (nil when it need not change:
// nothing was refunded) and the units refunded, at most n, and writes *d
// as Charge does.
func Refund(a Algorithm, state []byte, now, at, n int64, d *Decision) (next []byte, refunded int64) {
	switch a := a.(type) {
	case *TokenBucket:
		return a.RefundInto(state, now, at, n, d)
	case *GCRA:
		return a.RefundInto(state, now, at, n, d)
	case *LeakyBucket:
		return a.RefundInto(state, now, at, n, d)
	case *FixedWindow:
		return a.RefundInto(state, now, at, n, d)
	case *SlidingCounter:
		return a.RefundInto(state, now, at, n, d)
	case *SlidingLog:
		return a.RefundInto(state, now, at, n, d)
	case *Concurrency:
		return a.RefundInto(state, now, at, n, d)
	}
	next, refunded, *d = refundOther(a, state, now, at, n)
	return next, refunded
}

// SpentAt returns the instant that the units of a request admitted at now,
// with decision d, were recorded at: the instant a later Refund of them
// names. It is now, but for a sliding log whose clock stepped back behind
// its newest entry, which records the request at that entry's time.
func SpentAt(a Algorithm, now int64, d *Decision) int64 {
	if l, ok := a.(*SlidingLog); ok && d.Allowed && d.TTL > 0 && d.TTL < time.Duration(maxInt64) {
		return now + int64(d.TTL) - l.window
	}
	return now
}

const maxInt64 = 1<<63 - 1

// settledInto writes the decision of a settle: the key's state after it.
func (r *rate) settledInto(d *Decision, corrupt bool, remaining, reset int64) {
	d.Allowed = true
	d.Limit = r.capacity
	d.Remaining = max(0, min(remaining, r.capacity))
	d.RetryAfter = 0
	d.Reset = time.Duration(max(0, reset))
	d.Delay = 0
	d.TTL = time.Duration(max(0, reset))
	d.CorruptState = corrupt
}

// room returns how many whole units may be charged on top of spent (in the
// same scale as full, scale per unit) before the debt bound, twice full.
func room(full, spent, scale int64) int64 {
	if spent >= 2*full {
		return 0
	}
	return (2*full - spent) / scale
}

// faded returns how many nano-tokens the rate restores in the time from at
// to now, rounded up: what of the units spent at at has refilled at most.
func (r *rate) faded(at, now int64) uint64 {
	if now <= at {
		return 0
	}
	return mulDivCeil(uint64(now-at), uint64(r.limit)*unit, uint64(r.window))
}

// refundable returns the nano-tokens of n units spent at at that a bucket
// holding spent nano-tokens (after its refill to now) gives back: n less
// what the rate restored since at, at most spent.
func (r *rate) refundable(spent, at, now, n int64) int64 {
	if n <= 0 || spent <= 0 {
		return 0
	}
	want := uint64(min(n, r.capacity*2)) * unit
	f := r.faded(at, now)
	if f >= want {
		return 0
	}
	return int64(min(want-f, uint64(spent)))
}

// readState returns the token bucket state the record stands for, and
// whether it was corrupt.
func (a *TokenBucket) readState(state []byte, now int64) (codec.TokenBucket, bool) {
	s, ok := codec.ReadTokenBucket(state)
	if ok {
		return s, false
	}
	s, err := codec.DecodeTokenBucket(state)
	if err == nil {
		return s, false
	}
	return a.fromOther(state, now)
}

// ChargeInto is Charge for a token bucket: the tokens spent may reach twice
// the capacity.
func (a *TokenBucket) ChargeInto(state []byte, now, n int64, d *Decision) ([]byte, int64) {
	s, corrupt := a.readState(state, now)
	full := a.capacity * unit
	refilled, anchor := a.accrue(s.Updated, now, s.Spent)
	s.Spent -= refilled
	s.Updated = anchor
	c := min(max(n, 0), room(full, s.Spent, unit))
	if c == 0 && !corrupt {
		a.settledInto(d, false, (full-s.Spent)/unit, a.after(s.Updated, s.Spent, now))
		return nil, 0
	}
	s.Spent += c * unit
	next := codec.AppendTokenBucket(state, s)
	a.settledInto(d, corrupt, (full-s.Spent)/unit, a.after(s.Updated, s.Spent, now))
	return next, c
}

// RefundInto is Refund for a token bucket: n less what refilled since at,
// at most what is spent.
func (a *TokenBucket) RefundInto(state []byte, now, at, n int64, d *Decision) ([]byte, int64) {
	s, corrupt := a.readState(state, now)
	full := a.capacity * unit
	refilled, anchor := a.accrue(s.Updated, now, s.Spent)
	s.Spent -= refilled
	s.Updated = anchor
	back := a.refundable(s.Spent, at, now, n)
	if back == 0 {
		a.settledInto(d, corrupt, (full-s.Spent)/unit, a.after(s.Updated, s.Spent, now))
		return nil, 0
	}
	s.Spent -= back
	next := codec.AppendTokenBucket(state, s)
	a.settledInto(d, corrupt, (full-s.Spent)/unit, a.after(s.Updated, s.Spent, now))
	return next, back / unit
}

// readState returns the leaky bucket state the record stands for, and
// whether it was corrupt.
func (a *LeakyBucket) readState(state []byte, now int64) (codec.Bucket, bool) {
	s, err := codec.DecodeBucket(state, codec.TagLeakyBucket)
	if err != nil {
		return codec.Bucket{Updated: now}, isCorrupt(state)
	}
	return s, false
}

// ChargeInto is Charge for a leaky bucket: the work queued may reach twice
// the capacity.
func (a *LeakyBucket) ChargeInto(state []byte, now, n int64, d *Decision) ([]byte, int64) {
	s, corrupt := a.readState(state, now)
	full := a.capacity * unit
	drained, anchor := a.accrue(s.Updated, now, s.Level)
	s.Level -= drained
	s.Updated = anchor
	c := min(max(n, 0), room(full, s.Level, unit))
	if c == 0 && !corrupt {
		a.settledInto(d, false, (full-s.Level)/unit, a.after(s.Updated, s.Level, now))
		return nil, 0
	}
	s.Level += c * unit
	next := codec.AppendBucket(state, codec.TagLeakyBucket, s)
	a.settledInto(d, corrupt, (full-s.Level)/unit, a.after(s.Updated, s.Level, now))
	return next, c
}

// RefundInto is Refund for a leaky bucket: n less what drained since at, at
// most what is queued.
func (a *LeakyBucket) RefundInto(state []byte, now, at, n int64, d *Decision) ([]byte, int64) {
	s, corrupt := a.readState(state, now)
	full := a.capacity * unit
	drained, anchor := a.accrue(s.Updated, now, s.Level)
	s.Level -= drained
	s.Updated = anchor
	back := a.refundable(s.Level, at, now, n)
	if back == 0 {
		a.settledInto(d, corrupt, (full-s.Level)/unit, a.after(s.Updated, s.Level, now))
		return nil, 0
	}
	s.Level -= back
	next := codec.AppendBucket(state, codec.TagLeakyBucket, s)
	a.settledInto(d, corrupt, (full-s.Level)/unit, a.after(s.Updated, s.Level, now))
	return next, back / unit
}

// readTAT returns the record's TAT counted in a's interval, not before now
// (a TAT in the past is a full bucket), whether the record was in another
// layout or interval (so that a change must rewrite it whole), and whether
// it was corrupt.
func (a *GCRA) readTAT(state []byte, now int64) (tat int64, other, corrupt bool) {
	if t, ok := a.format.Read(state); ok {
		return max(t, now), false, false
	}
	s, err := codec.DecodeGCRA(state)
	if err != nil {
		return now, true, isCorrupt(state)
	}
	if s.Interval != a.interval && s.Interval != 0 {
		debt := uint64(until(s.TAT, now))
		return satAdd(now, clampI64(mulDivCeil(debt, uint64(a.interval), uint64(s.Interval)))), true, false
	}
	return max(s.TAT, now), true, false
}

// write stores tat in state: in place when the record is already in a's
// format.
func (a *GCRA) write(state []byte, tat int64, other bool) []byte {
	if other {
		return a.format.Append(state, tat)
	}
	a.format.Put(state, tat)
	return state
}

// ChargeInto is Charge for GCRA: the TAT may run up to twice the burst
// tolerance ahead of now.
func (a *GCRA) ChargeInto(state []byte, now, n int64, d *Decision) ([]byte, int64) {
	tat, other, corrupt := a.readTAT(state, now)
	c := min(max(n, 0), room(a.tau, until(tat, now), a.interval))
	if c == 0 && !corrupt {
		a.settledInto(d, false, a.available(tat, now), until(tat, now))
		return nil, 0
	}
	tat = satAdd(tat, c*a.interval)
	next := a.write(state, tat, other)
	a.settledInto(d, corrupt, a.available(tat, now), until(tat, now))
	return next, c
}

// RefundInto is Refund for GCRA: n intervals less the time passed since
// at, at most what the TAT is ahead of now.
func (a *GCRA) RefundInto(state []byte, now, at, n int64, d *Decision) ([]byte, int64) {
	tat, other, corrupt := a.readTAT(state, now)
	debt := until(tat, now)
	back := int64(0)
	if n > 0 && debt > 0 {
		want := min(n, 2*a.capacity) * a.interval
		if since := until(now, at); since < want {
			back = min(want-since, debt)
		}
	}
	if back == 0 {
		a.settledInto(d, corrupt, a.available(tat, now), debt)
		return nil, 0
	}
	tat -= back
	next := a.write(state, tat, other)
	a.settledInto(d, corrupt, a.available(tat, now), until(tat, now))
	return next, back / a.interval
}

// current returns the window record as of now: the current window's start
// and the record (a fresh one when the stored window has passed), and
// whether the stored record was corrupt.
func (a *FixedWindow) current(state []byte, now int64) (codec.Window, bool) {
	start := a.windowStart(now)
	s, err := codec.DecodeWindow(state)
	switch {
	case err != nil:
		return codec.Window{Start: start}, isCorrupt(state)
	case s.Start < start:
		return codec.Window{Start: start}, false
	}
	return s, false // s.Start > start: the clock stepped back, stay in the later window
}

// ttl is how long a window record holding s lasts: to the window's end
// while it counts anything.
func (a *FixedWindow) ttl(s codec.Window, now int64) int64 {
	if s.Count <= 0 {
		return 0
	}
	return until(a.endOf(s.Start), now)
}

// ChargeInto is Charge for a fixed window: the current window's count may
// reach twice the capacity; the debt ends with the window.
func (a *FixedWindow) ChargeInto(state []byte, now, n int64, d *Decision) ([]byte, int64) {
	s, corrupt := a.current(state, now)
	c := min(max(n, 0), room(a.capacity, s.Count, 1))
	if c == 0 && !corrupt {
		a.settledInto(d, false, a.capacity-s.Count, a.ttl(s, now))
		return nil, 0
	}
	s.Count += c
	next := codec.AppendWindow(state, s)
	a.settledInto(d, corrupt, a.capacity-s.Count, a.ttl(s, now))
	return next, c
}

// RefundInto is Refund for a fixed window: the units, when at falls in the
// current window, at most its count.
func (a *FixedWindow) RefundInto(state []byte, now, at, n int64, d *Decision) ([]byte, int64) {
	s, corrupt := a.current(state, now)
	k := int64(0)
	if n > 0 && a.windowStart(min(at, now)) == s.Start {
		k = min(n, s.Count)
	}
	if k == 0 {
		a.settledInto(d, corrupt, a.capacity-s.Count, a.ttl(s, now))
		return nil, 0
	}
	s.Count -= k
	next := codec.AppendWindow(state, s)
	a.settledInto(d, corrupt, a.capacity-s.Count, a.ttl(s, now))
	return next, k
}

// current returns the counter record as of now, rolled into the current
// window as a step rolls it, and whether the stored record was corrupt.
func (a *SlidingCounter) current(state []byte, now int64) (codec.Counter, bool) {
	sp := a.span(now)
	s, err := codec.DecodeCounter(state)
	switch {
	case err != nil:
		return codec.Counter{Start: sp.start}, isCorrupt(state)
	case s.Start < sp.start:
		carried := int64(0)
		if s.Start == sp.prev {
			carried = s.Count
		}
		return codec.Counter{Start: sp.start, Previous: carried}, false
	}
	return s, false
}

// settled writes the decision of a settle that leaves the record s.
func (a *SlidingCounter) settled(d *Decision, corrupt bool, s codec.Counter, now int64) {
	sp := a.spanFrom(s.Start)
	l, lp := sp.end-sp.start, sp.start-sp.prev
	elapsed := until(now, s.Start)
	capW := mul128(uint64(a.capacity), uint64(lp))
	usedW := mul128(uint64(s.Previous), uint64(min(lp, l-min(elapsed, l)))).add(mul128(uint64(s.Count), uint64(lp)))
	a.settledInto(d, corrupt, floorRoom(capW, usedW, lp), a.reset(s, sp, now))
}

// ChargeInto is Charge for a sliding counter: the current window's count
// may reach twice the capacity, and weighs in the next window as the
// previous one's does.
func (a *SlidingCounter) ChargeInto(state []byte, now, n int64, d *Decision) ([]byte, int64) {
	s, corrupt := a.current(state, now)
	c := min(max(n, 0), room(a.capacity, s.Count, 1))
	if c == 0 && !corrupt {
		a.settled(d, false, s, now)
		return nil, 0
	}
	s.Count += c
	next := codec.AppendCounter(state, s)
	a.settled(d, corrupt, s, now)
	return next, c
}

// RefundInto is Refund for a sliding counter: the units, when at falls in
// the current window, at most its count (the previous window's count has
// passed and is not refunded).
func (a *SlidingCounter) RefundInto(state []byte, now, at, n int64, d *Decision) ([]byte, int64) {
	s, corrupt := a.current(state, now)
	k := int64(0)
	if n > 0 && a.windowStart(min(at, now)) == s.Start {
		k = min(n, s.Count)
	}
	if k == 0 {
		a.settled(d, corrupt, s, now)
		return nil, 0
	}
	s.Count -= k
	next := codec.AppendCounter(state, s)
	a.settled(d, corrupt, s, now)
	return next, k
}

// liveTimes returns the times of the log's entries after horizon, oldest
// first, whether the record was corrupt, and whether it was absent or
// unreadable (then times is empty).
func (a *SlidingLog) liveTimes(state []byte, horizon int64) (times []int64, corrupt bool) {
	if l, aged, err := codec.ReadLogTable(state, horizon); err == nil {
		times = make([]int64, 0, l.Len-aged)
		for i := aged; i < l.Len; i++ {
			times = append(times, l.At(i))
		}
		return times, false
	}
	sp, err := codec.SplitLog(state, horizon)
	if err != nil && len(state) != 0 {
		if migrated, merr := codec.MigrateLog(state); merr == nil {
			sp, err = codec.SplitLog(migrated, horizon)
		} else {
			return nil, isCorrupt(state)
		}
	}
	if err != nil {
		return nil, false
	}
	times = make([]int64, 0, sp.Live)
	for it, i := sp.Iter(), 0; i < sp.Live; i++ {
		t, _ := it.Next()
		times = append(times, t)
	}
	return times, false
}

// horizon returns the time at or before which an entry has aged out at now.
func (a *SlidingLog) horizon(now int64) int64 {
	if now < minInt64+a.window {
		return minInt64
	}
	return now - a.window
}

const minInt64 = -1 << 63

// settledLog writes the decision of a settle that leaves the live entries
// times.
func (a *SlidingLog) settledLog(d *Decision, corrupt bool, times []int64, now int64) {
	reset := int64(0)
	if len(times) > 0 {
		reset = until(later(times[len(times)-1], a.window), now)
	}
	a.settledInto(d, corrupt, a.capacity-int64(len(times)), reset)
}

// ChargeInto is Charge for a sliding log: up to n entries at now (or at the
// newest live entry, when that is later), while the live entries number at
// most twice the capacity.
func (a *SlidingLog) ChargeInto(state []byte, now, n int64, d *Decision) ([]byte, int64) {
	times, corrupt := a.liveTimes(state, a.horizon(now))
	c := min(max(n, 0), room(a.capacity, int64(len(times)), 1))
	if c == 0 {
		if corrupt {
			a.settledInto(d, true, a.capacity, 0)
			return state[:0], 0 // dropped: equivalent to none
		}
		a.settledLog(d, false, times, now)
		return nil, 0
	}
	t := now
	if len(times) > 0 {
		t = max(now, times[len(times)-1])
	}
	for range c {
		times = append(times, t)
	}
	next := codec.AppendLogTable(state, times)
	a.settledLog(d, corrupt, times, now)
	return next, c
}

// RefundInto is Refund for a sliding log: up to n of the live entries made
// at exactly at.
func (a *SlidingLog) RefundInto(state []byte, now, at, n int64, d *Decision) ([]byte, int64) {
	times, corrupt := a.liveTimes(state, a.horizon(now))
	// The entries at at are a run: find its end, and take from it.
	end := len(times)
	for end > 0 && times[end-1] > at {
		end--
	}
	k := int64(0)
	for k < n && end-int(k) > 0 && times[end-int(k)-1] == at {
		k++
	}
	if k == 0 {
		a.settledLog(d, corrupt, times, now)
		return nil, 0
	}
	times = append(times[:end-int(k)], times[end:]...)
	if len(times) == 0 {
		a.settledInto(d, corrupt, a.capacity, 0)
		return state[:0], k // no entry left: equivalent to none
	}
	next := codec.AppendLogTable(state, times)
	a.settledLog(d, corrupt, times, now)
	return next, k
}
