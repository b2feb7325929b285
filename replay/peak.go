package replay

import (
	"math/bits"

	"github.com/sluice-go/sluice/algo"
)

// A caller's need under a rule is the smallest limit under which none of
// its requests would have been denied, the rule's other parameters kept
// (its window, and for a bucket its burst in the same proportion to the
// limit, rounded up). It is computed from the caller's own requests under
// the rule, all of them counted as spent, which is what they would have
// been under that limit:
//
//   - fixed_window: the most cost in one aligned window;
//   - sliding_log: the most cost in any trailing window, at each request
//     (entries a window or more old have aged out, as the algorithm ages
//     them);
//   - sliding_counter: the largest estimate at any request, the previous
//     window's count weighted by the part of it the trailing window still
//     covers, rounded up, plus this window's count with the request: the
//     algorithm admits a request exactly when its limit is at least that;
//   - token_bucket, leaky_bucket, gcra: by bisection over the limit,
//     stepping the algorithm itself through the caller's requests at each
//     candidate. A larger limit refills (or drains) faster and holds more,
//     so a trace admitted whole under one limit is admitted under every
//     larger one, and the bisection finds the least.
//
// Every figure is exact: integer arithmetic, at the requests' own
// nanosecond times. Under the rule, the caller is never denied exactly when
// its need is at most the limit; so the smallest limit that leaves a share
// q of a rule's callers never denied is the ceil(q·n)-th smallest need.
// (In all mode a request another rule denies spends nothing here, so the
// need counted is an upper bound there; it is exact for the rule alone.)

// needTracker follows one caller's use of one rule.
type needTracker struct {
	need  int64 // the running need (window algorithms)
	start int64 // the current aligned window (fixed, counter)
	count int64 // cost in it
	prev  int64 // cost in the window before it (counter)
	end   int64 // the current window's end (calendar)
	plen  int64 // the previous window's length (calendar counter)
	begun bool
	log   []int64 // sliding log: times and costs, pairs, live ones from logHead
	head  int
	sum   int64   // sliding log: cost live
	trace []int64 // buckets: times and costs, pairs
	total int64   // all cost
	most  int64   // the largest single cost
}

// windowKind says how a rule's need is tracked.
type windowKind uint8

const (
	kindFixed windowKind = iota
	kindCounter
	kindLog
	kindBucket
)

func kindFor(name algo.Name) windowKind {
	switch name {
	case algo.FixedWindowName:
		return kindFixed
	case algo.SlidingCounterName:
		return kindCounter
	case algo.SlidingLogName:
		return kindLog
	}
	return kindBucket
}

// add counts a request of cost at t (times never decrease).
func (n *needTracker) add(kind windowKind, window, t, cost int64) {
	n.total += cost
	n.most = max(n.most, cost)
	switch kind {
	case kindFixed:
		start := alignDown(t, window)
		if !n.begun || start != n.start {
			n.start, n.count, n.begun = start, 0, true
		}
		n.count += cost
		n.need = max(n.need, n.count)
	case kindCounter:
		start := alignDown(t, window)
		switch {
		case !n.begun:
			n.start, n.count, n.prev, n.begun = start, 0, 0, true
		case n.start < start:
			carried := int64(0)
			if n.start == start-window {
				carried = n.count
			}
			n.start, n.count, n.prev = start, 0, carried
		}
		elapsed := t - n.start
		// ceil(prev·(window-elapsed)/window), in 128 bits.
		hi, lo := bits.Mul64(uint64(n.prev), uint64(window-elapsed))
		q, r := bits.Div64(hi, lo, uint64(window))
		if r != 0 {
			q++
		}
		n.count += cost
		n.need = max(n.need, satAddU(q, n.count))
	case kindLog:
		horizon := t - window // entries at or before it have aged out
		for n.head < len(n.log) && n.log[n.head] <= horizon {
			n.sum -= n.log[n.head+1]
			n.head += 2
		}
		if n.head == len(n.log) {
			n.log, n.head = n.log[:0], 0
		} else if n.head > 64 && n.head*2 > len(n.log) {
			k := copy(n.log, n.log[n.head:])
			n.log, n.head = n.log[:k], 0
		}
		n.log = append(n.log, t, cost)
		n.sum += cost
		n.need = max(n.need, n.sum)
	default:
		n.trace = append(n.trace, t, cost)
	}
}

// addCalendar is add for a rule whose windows follow a calendar: a, the
// rule's fixed_window or sliding_counter, says where they start and end;
// a sliding counter weighs the previous window, of length lp, by
// min(lp, l-elapsed)/lp in a window of length l, as the algorithm does.
func (n *needTracker) addCalendar(kind windowKind, a algo.Algorithm, t, cost int64) {
	n.total += cost
	n.most = max(n.most, cost)
	if !n.begun || t >= n.end {
		start, end, _ := algo.WindowOf(a, t)
		prev, _, _ := algo.WindowOf(a, start-1)
		carried := int64(0)
		if n.begun && n.start == prev {
			carried = n.count
		}
		n.start, n.end, n.plen, n.count, n.prev, n.begun = start, end, start-prev, 0, carried, true
	}
	n.count += cost
	if kind != kindCounter {
		n.need = max(n.need, n.count)
		return
	}
	// ceil(prev·min(lp, l-elapsed)/lp), in 128 bits.
	hi, lo := bits.Mul64(uint64(n.prev), uint64(min(n.plen, n.end-t)))
	q, r := bits.Div64(hi, lo, uint64(n.plen))
	if r != 0 {
		q++
	}
	n.need = max(n.need, satAddU(q, n.count))
}

// satAddU returns q+c capped at the largest int64.
func satAddU(q uint64, c int64) int64 {
	s := q + uint64(c)
	if s < q || s > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(s)
}

// alignDown is the start of the aligned window holding t, as the window
// algorithms align them (whole multiples of window from the epoch).
func alignDown(t, window int64) int64 {
	q := t / window
	if t%window < 0 {
		q--
	}
	return q * window
}

// Unbounded is the need reported for a caller no valid limit of the rule's
// algorithm would have left undenied.
const Unbounded = int64(-1)

// finish returns the caller's need under a rule of the given algorithm and
// parameters, or Unbounded.
func (n *needTracker) finish(name algo.Name, p algo.Params) int64 {
	kind := kindFor(name)
	if kind != kindBucket {
		maxLimit := int64(algo.MaxLimit)
		if kind == kindLog {
			maxLimit = algo.MaxSlidingLogLimit
		}
		if n.need > maxLimit {
			return Unbounded
		}
		return n.need
	}
	return bucketNeed(name, p, n.trace, n.most, n.total)
}

// bucketNeed bisects for the least limit under which a bucket algorithm
// admits the whole trace (pairs of time and cost).
func bucketNeed(name algo.Name, p algo.Params, trace []int64, most, total int64) int64 {
	var state []byte
	admits := func(limit int64) bool {
		q := p
		q.Limit = limit
		if p.Burst > 0 {
			q.Burst = mulDivCeil(p.Burst, limit, p.Limit)
		}
		a, err := algo.New(name, q)
		if err != nil {
			return false
		}
		state = state[:0]
		for i := 0; i < len(trace); i += 2 {
			next, d := a.Step(state, trace[i], trace[i+1])
			if !d.Allowed {
				return false
			}
			if next != nil {
				state = next
			}
		}
		return true
	}
	hi := max(total, 1) // a capacity of the whole trace admits it
	if p.Burst > 0 && p.Burst < p.Limit {
		hi = mulDivCeil(hi, p.Limit, p.Burst)
	}
	lo, hi := int64(1), min(hi, algo.MaxLimit)
	if p.Burst == 0 {
		lo = max(1, most) // the capacity, the limit, must hold the largest request
	}
	if lo > hi || !admits(hi) {
		return Unbounded
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if admits(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

// mulDivCeil returns ceil(a·b/c) for positive a, b, c, capped at the
// largest int64.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}
