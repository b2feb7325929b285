package algo

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// This file holds a float64 reference model that mirrors the article's
// Python classes (seed/rate-limiter-lld.txt, strategies.py) line by line, and
// a rapid property per article algorithm checking that Step answers what the
// article's code answers on random traces.
//
// What the reference keeps from the article: float seconds, one record per
// key created by _initial on first use, _decide as written, the storage
// stamping updated_at after every call (denials included), and _verdict's
// flooring and clamping. What it takes from DESIGN.md instead, on purpose:
//
//   - capacity = burst or limit, and the refill or drain rate is
//     limit/window (the article's factory passes the capacity and derives
//     the rate from it);
//   - the sliding log keeps each entry's integer nanoseconds beside its
//     float seconds, so that a property can aim requests exactly at an
//     entry's ageing out; the comparisons are on the float seconds.
//
// Where float seconds and exact nanoseconds can disagree, and how the
// property stays robust:
//
//   - Times: traces start at 0 or a few windows after it and stay below
//     maxRefTime (10^6 s), so every time is an integer number of
//     nanoseconds below 2^53 and its float seconds are within 10^-10 s of
//     the truth. Comparisons that the exact values make at equality (an
//     entry exactly a window old, a time exactly on a window boundary, the
//     carried window exactly one window back) are made within that noise
//     (tieTime, tieFloor).
//   - Quantities: where the article compares a float level or estimate to
//     the cost, values within a small band of the boundary are ties, and the
//     reference follows the branch Step took (it is told Step's answer and
//     reports that the comparison was a tie). The band is a nanosecond's
//     worth of refill for float noise plus, for the buckets, one more per
//     step so far: Step's levels are whole nano-tokens as of a whole
//     nanosecond, so each partial refill can forgo under a nanosecond's
//     worth (never gain it), and Step may answer up to one nanosecond per
//     step more conservatively than exact arithmetic. At 60 steps that is
//     at most 61 ns of refill. Measured: the band overrides the float
//     comparison in about 0.5% of bucket steps, nine in ten of them float
//     noise under 0.01 ns at an exact boundary, the rest Step's forgone
//     fraction (1 to 6 ns); for the sliding counter, 0.04%, all noise.
//   - Remaining is compared as the floor of the reference's float, either
//     side of an integer within the band; RetryAfter and Delay within the
//     band converted to time (Step rounds durations up to the nanosecond).
//
// Outside the bands the answers must agree exactly; a real difference in
// rate, capacity, window arithmetic or retry would be off by whole tokens
// or many nanoseconds.

// refState is the article's LimiterState.
type refState struct {
	updatedAt   float64
	level       float64
	windowStart float64
	count       int64
	previous    int64
	log         []float64 // sliding log, float seconds (the stored times)
	logNs       []int64   // the same entries in nanoseconds
}

// refDecision is the article's Decision before _verdict floors it:
// remaining is kept as the float the algorithm computed.
type refDecision struct {
	allowed    bool
	limit      int64
	remaining  float64
	retryAfter float64
	delay      float64
	tie        bool  // the verdict came from a comparison within the band
	retryNs    int64 // the sliding log's retry_after in exact nanoseconds
}

// refLimiter is one of the article's StorageBackedLimiter subclasses over a
// single key.
type refLimiter struct {
	kind     Name
	capacity int64
	window   float64 // seconds
	rate     float64 // limit/window per second (DESIGN.md, not capacity/window)
	state    *refState

	band  float64 // tokens within which a comparison is a tie
	hint  bool    // the branch to take on a tie: what Step answered
	tie   bool    // set when a comparison was a tie
	scale float64 // the largest time magnitude in play, seconds
}

func newRef(kind Name, p Params) *refLimiter {
	return &refLimiter{
		kind:     kind,
		capacity: p.Capacity(),
		window:   float64(p.Window) / 1e9,
		rate:     float64(p.Limit) / (float64(p.Window) / 1e9),
	}
}

// allow is StorageBackedLimiter.allow plus InMemoryStorage.apply for one key.
func (r *refLimiter) allow(now float64, nowNs, cost int64) refDecision {
	r.tie = false
	r.scale = math.Abs(now) + r.window
	if r.state == nil {
		r.state = r.initial(now)
	}
	d := r.decide(r.state, now, nowNs, cost)
	r.state.updatedAt = now // the storage stamps it
	d.tie = r.tie
	return d
}

func (r *refLimiter) initial(now float64) *refState {
	switch r.kind {
	case TokenBucketName:
		return &refState{updatedAt: now, level: float64(r.capacity)}
	case FixedWindowName, SlidingCounterName:
		return &refState{updatedAt: now, windowStart: r.align(now)}
	}
	return &refState{updatedAt: now}
}

func (r *refLimiter) verdict(allowed bool, remaining, retryAfter, delay float64) refDecision {
	return refDecision{allowed: allowed, limit: r.capacity, remaining: remaining, retryAfter: math.Max(0, retryAfter), delay: delay}
}

func (r *refLimiter) decide(st *refState, now float64, nowNs, cost int64) refDecision {
	c := float64(cost)
	capacity := float64(r.capacity)
	switch r.kind {
	case TokenBucketName:
		st.level = math.Min(capacity, st.level+(now-st.updatedAt)*r.rate)
		if r.leq(c, st.level) { // state.level >= cost
			st.level -= c
			return r.verdict(true, st.level, 0, 0)
		}
		return r.verdict(false, st.level, (c-st.level)/r.rate, 0)

	case LeakyBucketName:
		st.level = math.Max(0, st.level-(now-st.updatedAt)*r.rate)
		room := capacity - st.level
		if r.leq(c, room) { // cost <= room
			delay := st.level / r.rate
			st.level += c
			return r.verdict(true, capacity-st.level, 0, delay)
		}
		return r.verdict(false, room, (c-room)/r.rate, 0)

	case FixedWindowName:
		start := r.align(now)
		if !r.tieTime(st.windowStart, start) { // state.window_start != start
			st.windowStart, st.count = start, 0
		}
		if st.count+cost <= r.capacity {
			st.count += cost
			return r.verdict(true, float64(r.capacity-st.count), 0, 0)
		}
		return r.verdict(false, float64(r.capacity-st.count), start+r.window-now, 0)

	case SlidingLogName:
		horizon := now - r.window
		for len(st.log) > 0 && (st.log[0] <= horizon || r.tieTime(st.log[0], horizon)) {
			st.log, st.logNs = st.log[1:], st.logNs[1:]
		}
		if int64(len(st.log))+cost <= r.capacity {
			for range cost {
				st.appendLog(nowNs)
			}
			return r.verdict(true, float64(r.capacity-int64(len(st.log))), 0, 0)
		}
		// The article reports 0 left on this denial; Sluice reports what
		// is left, as every other algorithm does (a deliberate difference:
		// a denied cost of 2 with 1 left says 1).
		index := int64(len(st.log)) + cost - r.capacity - 1
		d := r.verdict(false, float64(r.capacity-int64(len(st.log))), st.log[index]+r.window-now, 0)
		d.retryNs = st.logNs[index] + int64(math.Round(r.window*1e9)) - nowNs
		return d

	case SlidingCounterName:
		start := r.align(now)
		if !r.tieTime(st.windowStart, start) {
			var carried int64
			if r.tieTime(st.windowStart, start-r.window) {
				carried = st.count
			}
			st.windowStart, st.previous, st.count = start, carried, 0
		}
		overlap := 1.0 - (now-start)/r.window
		estimate := float64(st.previous)*overlap + float64(st.count)
		if r.leq(estimate+c, capacity) {
			st.count += cost
			return r.verdict(true, capacity-estimate-c, 0, 0)
		}
		return r.verdict(false, capacity-estimate, r.counterRetry(st, now, start, cost), 0)
	}
	panic("unknown reference algorithm " + r.kind)
}

// counterRetry is the sliding counter's retry_after with the deliberate
// difference DESIGN.md lists: the article solves for the previous window
// aging out within this window only (articleCounterRetry), and points at
// the next window's start when this one alone has no room, where this
// window's count, now the previous one, may still block the request. The
// reference solves the same inequality in this window, then in the next
// (this window's count carried at its weight), then the one after.
func (r *refLimiter) counterRetry(st *refState, now, start float64, cost int64) float64 {
	if room := float64(r.capacity - st.count - cost); room >= 0 {
		if st.previous <= 0 {
			return start - now
		}
		if e := r.window * (1 - room/float64(st.previous)); e < r.window {
			return start + e - now
		}
	}
	if st.count <= 0 {
		return start + r.window - now
	}
	if e := r.window * (1 - float64(r.capacity-cost)/float64(st.count)); e < r.window {
		return start + r.window + e - now
	}
	return start + 2*r.window - now
}

// articleCounterRetry is the article's own retry_after of the sliding
// counter, which TestReferenceModel pins to the article's demo.
func (r *refLimiter) articleCounterRetry(st *refState, now, start float64, cost int64) float64 {
	room := float64(r.capacity - st.count - cost)
	if st.previous <= 0 || room < 0 {
		return start + r.window - now
	}
	return start + r.window*(1-room/float64(st.previous)) - now
}

// align is math.floor(now / window) * window, with a quotient within float
// noise of an integer taken as that integer.
func (r *refLimiter) align(now float64) float64 {
	return tieFloor(now/r.window) * r.window
}

// appendLog adds one entry at nowNs. Entries never go backwards: a clock
// that stepped back logs at the newest entry's time, as Step does.
func (st *refState) appendLog(nowNs int64) {
	if n := len(st.logNs); n > 0 {
		nowNs = max(nowNs, st.logNs[n-1])
	}
	st.logNs = append(st.logNs, nowNs)
	st.log = append(st.log, float64(nowNs)/1e9)
}

// leq reports a <= b, treating values within the band as a tie resolved by
// the hint.
func (r *refLimiter) leq(a, b float64) bool {
	if r.band > 0 && math.Abs(a-b) <= r.band {
		r.tie = true
		return r.hint
	}
	return a <= b
}

// tieTime reports whether two float-second times are equal up to the noise
// of converting whole nanoseconds to seconds and subtracting a window: a few
// ulps of the largest time in play, well under a nanosecond for the times
// the traces use.
func (r *refLimiter) tieTime(a, b float64) bool {
	return math.Abs(a-b) <= 4*epsilon*r.scale
}

// tieFloor is math.Floor, except that a quotient within float noise of an
// integer is that integer.
func tieFloor(q float64) float64 {
	if r := math.Round(q); math.Abs(q-r) <= 8*epsilon*math.Max(1, math.Abs(q)) {
		return r
	}
	return math.Floor(q)
}

const epsilon = 0x1p-52

// maxRefTime bounds the times of a reference trace, in nanoseconds: below
// 2^20 s, a float64 of seconds resolves well under a nanosecond. Only
// jumping to a bucket's RetryAfter (a burst of 100 at 1 per hour is 100 h)
// could go further; such a jump is left out.
const maxRefTime = 1e15

// refTrace is one generated trace: parameters and requests.
type refTrace struct {
	p     Params
	base  int64
	steps []refStep
}

type refStep struct {
	dt   int64 // nanoseconds after the previous request (the first: after base)
	cost int64
	// retry, when set, replaces dt by the previous answer's RetryAfter plus
	// dt (dt is then -1, 0 or 1): the request lands exactly on, or one
	// nanosecond either side of, the moment Step said it would pass.
	retry bool
}

// windows are the window lengths traces draw from: round ones, ones that do
// not divide a second or a day, and the extremes of the range.
var windows = []time.Duration{
	time.Millisecond, 7 * time.Millisecond, 999_999_999, time.Second, 7 * time.Second,
	time.Minute, 7 * time.Minute, time.Hour,
}

// drawParams draws limit 1..50, a window from 1 ms to 1 h, and for a bucket
// an optional burst.
func drawParams(t *rapid.T, name Name) Params {
	p := Params{
		Limit: rapid.Int64Range(1, 50).Draw(t, "limit"),
		Window: rapid.OneOf(
			rapid.SampledFrom(windows),
			rapid.Map(rapid.Int64Range(int64(time.Millisecond), int64(time.Hour)), func(n int64) time.Duration { return time.Duration(n) }),
		).Draw(t, "window"),
	}
	if isBucket(name) && rapid.Bool().Draw(t, "has burst") {
		p.Burst = rapid.Int64Range(1, 100).Draw(t, "burst")
	}
	return p
}

func isBucket(name Name) bool {
	return name == TokenBucketName || name == LeakyBucketName || name == GCRAName
}

// drawDt draws how far the clock moves before a request: not at all, a
// nanosecond or a few, anything within two windows, or exactly a window
// fraction or boundary.
func drawDt(t *rapid.T, w int64) int64 {
	return rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(1, 3),
		rapid.Int64Range(1, 1000),
		rapid.Int64Range(1, w),
		rapid.Int64Range(1, 2*w),
		rapid.SampledFrom([]int64{w, w / 2, w / 3, w / 5, 2 * w, w - 1, w + 1}),
	).Draw(t, "dt")
}

// drawCost draws 1..capacity, mostly 1.
func drawCost(t *rapid.T, capacity int64) int64 {
	return rapid.OneOf(rapid.Just(int64(1)), rapid.Int64Range(1, capacity)).Draw(t, "cost")
}

func drawTrace(t *rapid.T, name Name, maxSteps int) refTrace {
	p := drawParams(t, name)
	w := int64(p.Window)
	tr := refTrace{p: p}
	tr.base = rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 3*w)).Draw(t, "base")
	n := rapid.IntRange(1, maxSteps).Draw(t, "steps")
	for range n {
		s := refStep{cost: drawCost(t, p.Capacity())}
		if rapid.IntRange(0, 4).Draw(t, "retry?") == 0 {
			s.retry, s.dt = true, rapid.Int64Range(-1, 1).Draw(t, "retry offset")
		} else {
			s.dt = drawDt(t, w)
		}
		tr.steps = append(tr.steps, s)
	}
	return tr
}

// TestReferenceEquivalence checks Step against the article's code on random
// traces, for each of the article's five algorithms.
func TestReferenceEquivalence(t *testing.T) {
	for _, name := range []Name{TokenBucketName, LeakyBucketName, FixedWindowName, SlidingLogName, SlidingCounterName} {
		t.Run(string(name), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				checkReference(t, name, drawTrace(t, name, 60))
			})
		})
	}
}

// TestSlidingLogBoundaries: requests aimed exactly at the moment a logged
// entry ages out (its time plus the window), or a nanosecond either side,
// get the reference's answer, with its retry_after to the nanosecond.
func TestSlidingLogBoundaries(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawParams(t, SlidingLogName)
		w := int64(p.Window)
		a := MustNew(SlidingLogName, p)
		ref := newRef(SlidingLogName, p)
		now := rapid.Int64Range(0, 3*w).Draw(t, "base")
		var state []byte
		for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
			dt := drawDt(t, w)
			if ref.state != nil && rapid.IntRange(0, 2).Draw(t, "aim?") > 0 {
				// The entries whose boundary, give or take 1 ns, is not
				// behind the clock.
				var ahead []int64
				for _, e := range ref.state.logNs {
					if e+w+1 >= now {
						ahead = append(ahead, e)
					}
				}
				if len(ahead) > 0 {
					e := rapid.SampledFrom(ahead).Draw(t, "entry")
					dt = max(0, e+w+rapid.Int64Range(-1, 1).Draw(t, "offset")-now)
				}
			}
			now += dt
			cost := drawCost(t, p.Capacity())
			next, d := a.Step(state, now, cost)
			if next != nil {
				state = next
			}
			rd := ref.allow(float64(now)/1e9, now, cost)
			call := fmt.Sprintf("step %d: Step(%d ns, cost %d) with %+v", i, now, cost, p)
			switch {
			case d.Allowed != rd.allowed:
				t.Fatalf("%s = allowed %v, reference %v\nStep %+v\nreference log %v", call, d.Allowed, rd.allowed, d, ref.state.logNs)
			case d.Remaining != int64(rd.remaining):
				t.Fatalf("%s: Remaining = %d, reference %v", call, d.Remaining, rd.remaining)
			case !d.Allowed && int64(d.RetryAfter) != rd.retryNs:
				t.Fatalf("%s: RetryAfter = %d ns, reference %d ns", call, d.RetryAfter, rd.retryNs)
			}
		}
	})
}

func checkReference(t *rapid.T, name Name, tr refTrace) {
	a := MustNew(name, tr.p)
	ref := newRef(name, tr.p)
	var (
		state []byte
		now   = tr.base
		last  Decision
	)
	for i, s := range tr.steps {
		if s.retry && !last.Allowed && i > 0 && now+int64(last.RetryAfter) < maxRefTime {
			now += int64(last.RetryAfter) + s.dt
		} else {
			now += max(s.dt, 0)
		}
		next, d := a.Step(state, now, s.cost)
		if next != nil {
			state = next
		}
		last = d

		// The bands: float noise on the times (a fraction of a nanosecond
		// at these magnitudes, counted generously as one), and for the
		// buckets up to one nanosecond of refill per step before this one.
		drift := 0.0
		if name == TokenBucketName || name == LeakyBucketName {
			drift = float64(i+1) * 1e-9
		}
		noiseT := 1e-9
		ref.band = (drift+noiseT)*ref.rate + 64*epsilon*float64(ref.capacity)*float64(i+1)
		ref.hint = d.Allowed
		rd := ref.allow(float64(now)/1e9, now, s.cost)

		call := fmt.Sprintf("step %d: Step(%d ns, cost %d) with %+v", i, now, s.cost, tr.p)
		if d.Allowed != rd.allowed {
			t.Fatalf("%s = allowed %v, reference %v\nStep %+v\nreference %+v", call, d.Allowed, rd.allowed, d, rd)
		}
		if d.Limit != rd.limit {
			t.Fatalf("%s: Limit = %d, reference %d", call, d.Limit, rd.limit)
		}
		if !floorWithin(d.Remaining, rd.remaining, ref.band) {
			t.Fatalf("%s: Remaining = %d, reference %v (band %g)\nStep %+v", call, d.Remaining, rd.remaining, ref.band, d)
		}
		// Durations: the band in time, plus Step's rounding up to the
		// nanosecond.
		tolT := drift + noiseT + ref.band/ref.rate + 1e-9
		if !d.Allowed && math.Abs(d.RetryAfter.Seconds()-rd.retryAfter) > tolT {
			t.Fatalf("%s: RetryAfter = %v, reference %.12fs (tolerance %g s)\nStep %+v", call, d.RetryAfter, rd.retryAfter, tolT, d)
		}
		if math.Abs(d.Delay.Seconds()-rd.delay) > tolT {
			t.Fatalf("%s: Delay = %v, reference %.12fs (tolerance %g s)", call, d.Delay, rd.delay, tolT)
		}
	}
}

// floorWithin reports whether got is _verdict's max(0, floor(x)) for some x
// within band of the reference's value.
func floorWithin(got int64, x, band float64) bool {
	for _, v := range []float64{x, x - band, x + band} {
		if got == int64(math.Max(0, math.Floor(v))) {
			return true
		}
	}
	return false
}

// TestReferenceModel pins the reference itself to the article's printed
// demo, so that the property above compares against the article and not
// against a mistake in the mirror.
func TestReferenceModel(t *testing.T) {
	p := Params{Limit: 5, Window: time.Second}
	for _, c := range []struct {
		name  Name
		retry float64
	}{
		// The sliding counter's 1.2 s is the deliberate difference (the
		// article prints 1 s, where the request is denied again): its own
		// formula is pinned below.
		{TokenBucketName, 0.2}, {LeakyBucketName, 0.2}, {FixedWindowName, 1}, {SlidingLogName, 1}, {SlidingCounterName, 1.2},
	} {
		ref := newRef(c.name, p)
		allowed := 0
		var d refDecision
		for range 7 {
			d = ref.allow(0, 0, 1)
			if d.allowed {
				allowed++
			}
		}
		if allowed != 5 || math.Abs(d.retryAfter-c.retry) > 1e-12 {
			t.Errorf("reference %s: %d allowed, Retry-After %v; the article prints 5 and %v", c.name, allowed, d.retryAfter, c.retry)
		}
	}
	// The article's own sliding-counter formula gives its printed 1 s:
	// five in the window, so it points at the window's end.
	art := newRef(SlidingCounterName, p)
	st := &refState{count: 5}
	if got := art.articleCounterRetry(st, 0, 0, 1); math.Abs(got-1) > 1e-12 {
		t.Errorf("the article's sliding-counter retry_after: %v, the article prints 1", got)
	}
	// The boundary burst.
	fixed, sliding := newRef(FixedWindowName, p), newRef(SlidingCounterName, p)
	var nf, ns int
	for _, now := range []float64{1_000_000.9, 1_000_001.0} {
		for range 5 {
			if fixed.allow(now, int64(now*1e9), 1).allowed {
				nf++
			}
			if sliding.allow(now, int64(now*1e9), 1).allowed {
				ns++
			}
		}
	}
	if nf != 10 || ns != 5 {
		t.Errorf("reference boundary burst: fixed %d, sliding %d; the article: 10 and 5", nf, ns)
	}
}
