package engine_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// Clock trouble through the engine and its stores, for every algorithm: a
// clock stepped back (an NTP correction, or an operator), one that stands
// still, and one that leaps years ahead. The engine's own SystemClock never
// steps back; a Clock supplied in Options may. algo/clock_test.go checks the
// same of the steps alone; here the stores' expiry, computed from the
// stepped-back time, takes part too.

// clockStores are the stores the clock properties run over. The durable tier
// is left out of the rapid properties (a Pebble store per check is slow);
// TestClockLeapsForward covers it.
var clockStores = []store{
	{"memory", func(engine.Clock) backend.Backend { return memory.New(&memory.Options{SweepInterval: -1, Shards: 4}) }},
	{"plain", func(engine.Clock) backend.Backend { return newMapBackend() }},
	{"swap", openSwapStore},
}

func checkValid(t interface{ Fatalf(string, ...any) }, call string, d algo.Decision, capacity int64) {
	switch {
	case d.Limit != capacity:
		t.Fatalf("%s: Limit %d, want the capacity %d", call, d.Limit, capacity)
	case d.Remaining < 0 || d.Remaining > capacity:
		t.Fatalf("%s: Remaining %d outside 0..%d", call, d.Remaining, capacity)
	case d.RetryAfter < 0 || d.Reset < 0 || d.TTL < 0 || d.Delay < 0:
		t.Fatalf("%s: negative duration in %+v", call, d)
	case !d.Allowed && d.RetryAfter <= 0:
		t.Fatalf("%s: denied without a positive RetryAfter: %+v", call, d)
	}
}

// TestClockStepsBackThroughTheEngine: after any history on one key, its last
// request at time T (so the key has a live record at T), the clock steps back (by a nanosecond, up to three windows, an
// hour or a day) and requests of cost 1 follow while it climbs back towards
// T, the store swept now and then as the clock reads. They admit no more
// than the same requests all made at T would: nothing refills while the
// clock is behind the record, neither through the algorithm nor through a
// record the store lets expire early because its expiry was reckoned from
// the stepped-back time. The reference is a second engine replaying the
// history, then frozen at T.
func TestClockStepsBackThroughTheEngine(t *testing.T) {
	for _, st := range clockStores {
		t.Run(st.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				l := rapid.SampledFrom(genLimits(t)).Draw(t, "limit")
				c, w := l.Algorithm.Params().Capacity(), int64(l.Algorithm.Params().Window)
				back, frozen := engine.NewFakeClock(t0), engine.NewFakeClock(t0)
				eb, err := engine.New(st.open(back), &engine.Options{Clock: back, Stripes: 4})
				if err != nil {
					t.Fatal(err)
				}
				defer eb.Close()
				ef, err := engine.New(st.open(frozen), &engine.Options{Clock: frozen, Stripes: 4})
				if err != nil {
					t.Fatal(err)
				}
				defer ef.Close()
				for range rapid.IntRange(1, 20).Draw(t, "history") {
					dt := time.Duration(rapid.Int64Range(0, 2*w).Draw(t, "dt"))
					back.Advance(dt)
					frozen.Advance(dt)
					cost := rapid.Int64Range(1, c).Draw(t, "cost")
					d1, err1 := eb.Apply(context.Background(), l, "k", cost)
					d2, err2 := ef.Apply(context.Background(), l, "k", cost)
					if err1 != nil || err2 != nil || d1 != d2 {
						t.Fatalf("the two engines part before the step back: %+v %v / %+v %v", d1, err1, d2, err2)
					}
				}
				end := back.Now()
				stepBack := rapid.OneOf(
					rapid.Int64Range(1, 3*w),
					rapid.SampledFrom([]int64{int64(time.Hour), int64(24 * time.Hour)}),
				).Draw(t, "step back")
				back.Advance(-time.Duration(stepBack))
				var gotBack, gotFrozen int64
				for i := range rapid.IntRange(1, 3*int(c)).Draw(t, "requests") {
					dt := rapid.Int64Range(0, 2*w).Draw(t, "climb")
					if back.Now()+dt >= end {
						break // the clock has caught up: what follows is ordinary time
					}
					back.Advance(time.Duration(dt))
					if rapid.IntRange(0, 3).Draw(t, "sweep") == 0 {
						if _, err := eb.Sweep(1 << 20); err != nil {
							t.Fatal(err)
						}
					}
					db, err1 := eb.Apply(context.Background(), l, "k", 1)
					df, err2 := ef.Apply(context.Background(), l, "k", 1)
					if err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
					call := fmt.Sprintf("%s, request %d at T-%v", l.Namespace, i, time.Duration(end-back.Now()))
					checkValid(t, call, db, c)
					if db.Allowed {
						gotBack++
					}
					if df.Allowed {
						gotFrozen++
					}
					if gotBack > gotFrozen {
						t.Fatalf("%s: %d admitted since the clock stepped back %v, %d with it frozen at T",
							call, gotBack, time.Duration(stepBack), gotFrozen)
					}
				}
			})
		})
	}
}

// TestClockStandsStillThroughTheEngine: with the clock frozen after any
// history, requests of any cost admit at most the capacity in total.
func TestClockStandsStillThroughTheEngine(t *testing.T) {
	for _, st := range clockStores {
		t.Run(st.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				limits := genLimits(t)
				clock := engine.NewFakeClock(t0)
				e, err := engine.New(st.open(clock), &engine.Options{Clock: clock, Stripes: 4})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				for range rapid.IntRange(0, 30).Draw(t, "history") {
					l := rapid.SampledFrom(limits).Draw(t, "limit")
					clock.Advance(genStep(t))
					if _, err := e.Apply(context.Background(), l, "k", rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(t, "cost")); err != nil {
						t.Fatal(err)
					}
				}
				l := rapid.SampledFrom(limits).Draw(t, "frozen limit")
				c := l.Algorithm.Params().Capacity()
				var spent int64
				for i := range rapid.IntRange(1, 40).Draw(t, "frozen requests") {
					cost := rapid.Int64Range(1, c).Draw(t, "cost")
					d, err := e.Apply(context.Background(), l, "k", cost)
					if err != nil {
						t.Fatal(err)
					}
					checkValid(t, fmt.Sprintf("frozen request %d", i), d, c)
					if d.Allowed {
						spent += cost
					}
					if spent > c {
						t.Fatalf("%s: admitted %d with the clock frozen, capacity %d", l.Namespace, spent, c)
					}
				}
			})
		})
	}
}

// leapBound is the longest a decision's TTL, Reset or RetryAfter may be
// under p: the time to refill or drain the capacity, at the per-unit
// interval rounded up to the nanosecond (the buckets), or two windows (the
// sliding counter's record outlives its window by one).
func leapBound(p algo.Params) time.Duration {
	w, c, l := int64(p.Window), p.Capacity(), p.Limit
	return time.Duration(max(2*w, c*((w+l-1)/l)))
}

// TestClockLeapsForward: the clock leaps from now to years ahead (1 to 200),
// over the memory store and the durable tier on Pebble. The first request
// after the leap finds the full capacity; every answer is valid with its
// durations within leapBound and a positive TTL on admission; and with the
// clock then frozen, no more than the capacity is admitted (the record's
// expiry, now + TTL, must not overflow into the past).
func TestClockLeapsForward(t *testing.T) {
	const year = 365 * 24 * time.Hour
	stores := []struct {
		name string
		open func(t *testing.T) backend.Backend
	}{
		{"memory", func(*testing.T) backend.Backend { return memory.New(&memory.Options{SweepInterval: -1}) }},
		{"pebble", func(t *testing.T) backend.Backend { return openPebble(t, t.TempDir()) }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			e := openDurable(t, st.open(t), clock, engine.Interval)
			defer e.Close()
			for _, years := range []time.Duration{1, 10, 200} {
				for _, name := range algo.Names {
					p := algo.Params{Limit: 3, Window: time.Minute}
					if name == algo.TokenBucketName || name == algo.GCRAName || name == algo.LeakyBucketName {
						p.Burst = 5
					}
					l := limit(name, p, string(name))
					clock.SetUnixNano(t0.UnixNano())
					for range 10 {
						e.Apply(context.Background(), l, "k", 1)
					}
					clock.Advance(years * year)
					c, bound := p.Capacity(), leapBound(p)
					var spent int64
					for i := range 2 * c {
						d, err := e.Apply(context.Background(), l, "k", 1)
						call := fmt.Sprintf("%s, %d years on, request %d", name, years, i)
						if err != nil {
							t.Fatalf("%s: %v", call, err)
						}
						checkValid(t, call, d, c)
						if i == 0 && (!d.Allowed || d.Remaining != c-1) {
							t.Fatalf("%s: %+v; want the full capacity after the leap", call, d)
						}
						if d.TTL > bound || d.Reset > bound || d.RetryAfter > bound {
							t.Fatalf("%s: %+v; a duration exceeds %v", call, d, bound)
						}
						if d.Allowed {
							spent++
							if d.TTL <= 0 {
								t.Fatalf("%s: admitted with TTL %v", call, d.TTL)
							}
						}
					}
					if spent != c {
						t.Fatalf("%s, %d years on: admitted %d of %d with the clock frozen, want the capacity", name, years, spent, 2*c)
					}
				}
			}
		})
	}
}

// TestClockAtTheEndOfTime: in the last window of int64 time (April 2262) no
// call fails or panics and every answer is valid. What does not hold there,
// and is not checked: the capacity. A record's end saturates at the last
// nanosecond, so an admission's TTL comes out 0 (or now+TTL would overflow)
// and the engine drops the record: at math.MaxInt64 itself every algorithm
// admits every request, and GCRA does in the whole last window.
func TestClockAtTheEndOfTime(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	e := newEngine(t, memory.New(&memory.Options{SweepInterval: -1}), clock)
	for _, name := range algo.Names {
		l := limit(name, algo.Params{Limit: 3, Window: time.Minute}, string(name))
		for _, before := range []int64{int64(time.Minute), 1, 0} {
			clock.SetUnixNano(math.MaxInt64 - before)
			for i := range 6 {
				d, err := e.Apply(context.Background(), l, "k", 1)
				if err != nil {
					t.Fatalf("%s at MaxInt64-%d: %v", name, before, err)
				}
				checkValid(t, fmt.Sprintf("%s at MaxInt64-%d, request %d", name, before, i), d, 3)
			}
		}
	}
}
