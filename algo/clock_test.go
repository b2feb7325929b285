package algo

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Clock trouble at the level of one step: a clock that stands still, and one
// that leaps years ahead, up to the last representable nanosecond. (A clock
// stepping back is TestClockStepsBack's.) The engine's clock_test.go checks
// the same through the engine and its stores.

// ttlBound is the longest any duration in a decision may be under p, for a
// record written at or after the time it is stepped at: the time to refill or
// drain the whole capacity at limit per window (the buckets; capacity times
// the per-unit interval rounded up to the nanosecond, as GCRA keeps it), or
// two windows
// (the sliding counter's record outlives its window by one; the others'
// records, one).
func ttlBound(p Params) time.Duration {
	w := int64(p.Window)
	// GCRA rounds its emission interval up to the nanosecond.
	fill := clampI64(mulDiv(uint64(p.Capacity()), mulDivCeil(1, uint64(w), uint64(p.Limit)), 1))
	return time.Duration(max(2*w, fill))
}

// checkBounded fails t when a duration of d exceeds bound.
func checkBounded(t *rapid.T, call string, d Decision, bound time.Duration) {
	t.Helper()
	if d.TTL > bound || d.Reset > bound || d.RetryAfter > bound || d.Delay > bound {
		t.Fatalf("%s: a duration in %+v exceeds the bound %v", call, d, bound)
	}
}

// TestClockStandsStill: from any record, requests at one frozen instant never
// admit more than the capacity in total, and each admission lowers Remaining
// by at least its cost (nothing refills while no time passes).
func TestClockStandsStill(t *testing.T) {
	for _, name := range Names {
		t.Run(string(name), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				tr := drawPropTrace(t, name)
				a := MustNew(name, tr.p)
				ev := tr.play(t, a)
				// Replay to get the record the trace left behind.
				var state []byte
				for _, e := range ev {
					if next, _ := a.Step(state, e.now, e.cost); next != nil {
						state = next
					}
				}
				now := ev[len(ev)-1].now + rapid.Int64Range(0, int64(tr.p.Window)).Draw(t, "pause")
				var spent int64
				remaining := int64(math.MaxInt64)
				for i := range rapid.IntRange(1, 3*int(tr.p.Capacity())).Draw(t, "requests") {
					cost := drawCost(t, tr.p.Capacity())
					next, d := a.Step(clone(state), now, cost)
					call := fmt.Sprintf("frozen request %d at %d, cost %d", i, now, cost)
					checkDecision(t, a, call, next, d)
					checkBounded(t, call, d, ttlBound(tr.p))
					if d.Allowed {
						if remaining != math.MaxInt64 && d.Remaining > remaining-cost {
							t.Fatalf("%s: remaining %d after the last admission, %d after this one", call, remaining, d.Remaining)
						}
						remaining = d.Remaining
						spent += cost
						state = next
					}
					if spent > tr.p.Capacity() {
						t.Fatalf("%s: admitted %d at one instant, capacity %d", call, spent, tr.p.Capacity())
					}
				}
			})
		})
	}
}

// TestClockLeapsForward: after any trace the clock leaps ahead by up to two
// hundred years and goes on from there: every answer is valid, every
// duration is within ttlBound, and the first request after the leap finds
// the full capacity. Or it leaps to within three windows of the largest
// int64 nanosecond (April 2262), where the records' times saturate: there
// nothing panics, Remaining stays within 0..capacity and no duration is
// negative (see checkSaturated for what does not hold). A clock that then
// steps back to the trace's time is answered validly too.
func TestClockLeapsForward(t *testing.T) {
	const year = int64(365 * 24 * time.Hour)
	for _, name := range Names {
		t.Run(string(name), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				tr := drawPropTrace(t, name)
				a := MustNew(name, tr.p)
				w := int64(tr.p.Window)
				bound := ttlBound(tr.p)
				var state []byte
				last := tr.base
				for _, e := range tr.play(t, a) {
					if next, _ := a.Step(state, e.now, e.cost); next != nil {
						state = next
					}
					last = e.now
				}
				// Years ahead, with room for every record the algorithm
				// writes before int64 time runs out; or in the last
				// windows of int64 time, where nothing fits and the
				// algorithms saturate.
				end := rapid.Bool().Draw(t, "to the end of time")
				var now int64
				if end {
					now = math.MaxInt64 - rapid.Int64Range(0, 3*w).Draw(t, "before the end")
				} else {
					years := rapid.Int64Range(1, 200).Draw(t, "years")
					now = last + years*year + rapid.Int64Range(0, w).Draw(t, "and")
				}
				for i := range rapid.IntRange(1, 20).Draw(t, "requests") {
					if i > 0 {
						dt := drawDt(t, w)
						if now > math.MaxInt64-dt {
							dt = 0
						}
						now += dt
					}
					cost := drawCost(t, tr.p.Capacity())
					next, d := a.Step(clone(state), now, cost)
					call := fmt.Sprintf("request %d after the leap, at %d, cost %d", i, now, cost)
					if end {
						checkSaturated(t, a, call, next, d)
					} else {
						checkDecision(t, a, call, next, d)
						checkBounded(t, call, d, bound)
						if i == 0 && (!d.Allowed || d.Remaining != tr.p.Capacity()-cost) {
							t.Fatalf("%s: %+v; want the full capacity %d after the leap", call, d, tr.p.Capacity())
						}
					}
					if d.Allowed {
						state = next
					}
				}
				// Back to the trace's time, as an NTP correction would.
				next, d := a.Step(clone(state), last, 1)
				checkDecision(t, a, fmt.Sprintf("request back at %d", last), next, d)
			})
		})
	}
}

// checkSaturated is what holds in the last windows of int64 time: the
// answer's Limit is the capacity, Remaining is within 0..capacity, no
// duration is negative, a denial writes nothing and names a positive wait,
// and a record written decodes. Not checked, because the saturated
// arithmetic does not give it: that an admission's TTL is positive (the
// sliding counter's record would end after the last nanosecond, and its TTL
// comes out 0, which tells a store to drop it), and that Remaining is exact
// (GCRA's theoretical arrival time saturates, so an admission can report
// more remaining than is left).
func checkSaturated(t *rapid.T, a Algorithm, call string, next []byte, d Decision) {
	t.Helper()
	capacity := a.Params().Capacity()
	switch {
	case d.Limit != capacity:
		t.Fatalf("%s: Limit = %d, want the capacity %d", call, d.Limit, capacity)
	case d.Remaining < 0 || d.Remaining > capacity:
		t.Fatalf("%s: Remaining = %d outside 0..%d", call, d.Remaining, capacity)
	case d.RetryAfter < 0 || d.Reset < 0 || d.Delay < 0 || d.TTL < 0:
		t.Fatalf("%s: negative duration in %+v", call, d)
	case !d.Allowed && (next != nil || d.RetryAfter <= 0):
		t.Fatalf("%s: denied with record %x and %+v", call, next, d)
	case d.Allowed && next == nil:
		t.Fatalf("%s: admitted without a record: %+v", call, d)
	}
	if next != nil {
		if _, d2 := a.Step(append([]byte(nil), next...), 0, 0); d2.CorruptState {
			t.Fatalf("%s: the record written does not decode as %s: %x", call, a.Name(), next)
		}
	}
}
