package algo

import (
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/codec"
)

// The properties DESIGN.md asks of every algorithm, checked on random traces
// with rapid. A trace is a run of requests against one key: parameters from
// drawParams, times that move forwards by drawDt (nothing, a nanosecond, a
// window boundary, ...) and costs of 1..capacity.

// event is one request of a trace and its answer.
type event struct {
	now, cost int64
	d         Decision
}

// propTrace is a drawn trace: parameters, a start time and the requests'
// time steps and costs.
type propTrace struct {
	p     Params
	base  int64
	dts   []int64
	costs []int64
}

// drawPropTrace draws a trace with times that never go backwards. Besides
// drawDt's steps, a step may land exactly on the previous answer's
// RetryAfter or TTL, or on the next window boundary (marked negative here
// and resolved by times()).
func drawPropTrace(t *rapid.T, name Name) propTrace {
	p := drawParams(t, name)
	w := int64(p.Window)
	tr := propTrace{p: p}
	// Far from the epoch, near it, or before it.
	tr.base = rapid.SampledFrom([]int64{0, 1_700_000_000e9 + 123_456_789, -5e9 - 7}).Draw(t, "base") +
		rapid.Int64Range(0, 2*w).Draw(t, "base offset")
	n := rapid.IntRange(1, 50).Draw(t, "steps")
	for range n {
		var dt int64
		switch rapid.IntRange(0, 5).Draw(t, "dt kind") {
		case 0:
			dt = -1 // the previous answer's RetryAfter (or TTL when allowed)
		case 1:
			dt = -2 // the next window boundary
		default:
			dt = drawDt(t, w)
		}
		tr.dts = append(tr.dts, dt)
		tr.costs = append(tr.costs, drawCost(t, p.Capacity()))
	}
	return tr
}

// step resolves a drawn time step against the previous answer.
func (tr propTrace) step(i int, now int64, last Decision) int64 {
	switch dt := tr.dts[i]; dt {
	case -1:
		if last.Allowed {
			return now + int64(last.TTL)
		}
		return now + int64(last.RetryAfter)
	case -2:
		return align(now, int64(tr.p.Window)) + int64(tr.p.Window)
	default:
		return now + dt
	}
}

// play runs the trace against a, keeping the record as a store would.
func (tr propTrace) play(t *rapid.T, a Algorithm) []event {
	var (
		state []byte
		now   = tr.base
		last  Decision
		out   []event
	)
	for i, cost := range tr.costs {
		now = tr.step(i, now, last)
		next, d := a.Step(state, now, cost)
		checkDecision(t, a, fmt.Sprintf("step %d: Step(%d, cost %d)", i, now, cost), next, d)
		if next != nil {
			state = next
		}
		last = d
		out = append(out, event{now, cost, d})
	}
	return out
}

// checkDecision holds for every answer: remaining within 0..capacity, Limit
// the capacity, a denial writes nothing and says when to come back, an
// admission writes a record of its own algorithm that lives a while, Delay
// only on an admitted leaky-bucket request, no negative duration.
func checkDecision(t *rapid.T, a Algorithm, call string, next []byte, d Decision) {
	t.Helper()
	capacity := a.Params().Capacity()
	switch {
	case d.Limit != capacity:
		t.Fatalf("%s: Limit = %d, want the capacity %d", call, d.Limit, capacity)
	case d.Remaining < 0 || d.Remaining > capacity:
		t.Fatalf("%s: Remaining = %d outside 0..%d", call, d.Remaining, capacity)
	case d.RetryAfter < 0 || d.Reset < 0 || d.Delay < 0 || d.TTL < 0:
		t.Fatalf("%s: negative duration in %+v", call, d)
	case d.Delay != 0 && (a.Name() != LeakyBucketName || !d.Allowed):
		t.Fatalf("%s: Delay %v from %s (allowed %v)", call, d.Delay, a.Name(), d.Allowed)
	case d.Allowed && (next == nil || d.RetryAfter != 0 || d.TTL <= 0):
		t.Fatalf("%s: admitted with record %x and %+v", call, next, d)
	case !d.Allowed && (next != nil || d.RetryAfter <= 0):
		t.Fatalf("%s: denied with record %x and %+v", call, next, d)
	}
	if next != nil {
		if _, d2 := a.Step(append([]byte(nil), next...), 0, 0); d2.CorruptState {
			t.Fatalf("%s: the record written does not decode as %s: %x", call, a.Name(), next)
		}
	}
}

// TestSafety: no algorithm admits more than it promises, whatever the trace.
func TestSafety(t *testing.T) {
	// The buckets (token, leaky and GCRA): at most capacity + rate·T in any
	// interval of length T, checked over every pair of admitted times with
	// exact rational arithmetic. GCRA needs no rounding allowance: its
	// interval rounds up to the nanosecond, which only slows it.
	for _, name := range []Name{TokenBucketName, LeakyBucketName, GCRAName} {
		t.Run(string(name), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				tr := drawPropTrace(t, name)
				ev := admitted(tr.play(t, MustNew(name, tr.p)))
				c, l, w := tr.p.Capacity(), tr.p.Limit, int64(tr.p.Window)
				for i := range ev {
					sum := int64(0)
					for j := i; j < len(ev); j++ {
						sum += ev[j].cost
						// sum <= c + (t_j - t_i)·l/w  <=>  (sum-c)·w <= (t_j-t_i)·l
						lhs := new(big.Int).Mul(big.NewInt(sum-c), big.NewInt(w))
						rhs := new(big.Int).Mul(big.NewInt(ev[j].now-ev[i].now), big.NewInt(l))
						if lhs.Cmp(rhs) > 0 {
							t.Fatalf("admitted %d in [%d, %d] (%v): more than %d + %v·%d/%v", sum, ev[i].now, ev[j].now,
								time.Duration(ev[j].now-ev[i].now), c, time.Duration(ev[j].now-ev[i].now), l, tr.p.Window)
						}
					}
				}
			})
		})
	}
	t.Run(string(SlidingLogName), func(t *testing.T) {
		// At most limit in any window (t-W, t]; the fullest such window
		// ends at an admitted request.
		rapid.Check(t, func(t *rapid.T) {
			tr := drawPropTrace(t, SlidingLogName)
			ev := admitted(tr.play(t, MustNew(SlidingLogName, tr.p)))
			w := int64(tr.p.Window)
			for j := range ev {
				sum := int64(0)
				for i := j; i >= 0 && ev[i].now > ev[j].now-w; i-- {
					sum += ev[i].cost
				}
				if sum > tr.p.Limit {
					t.Fatalf("admitted %d in the window ending at %d, limit %d", sum, ev[j].now, tr.p.Limit)
				}
			}
		})
	})
	t.Run(string(FixedWindowName), func(t *testing.T) {
		// At most limit in each window aligned to the epoch.
		rapid.Check(t, func(t *rapid.T) {
			tr := drawPropTrace(t, FixedWindowName)
			per := map[int64]int64{}
			for _, e := range admitted(tr.play(t, MustNew(FixedWindowName, tr.p))) {
				start := align(e.now, int64(tr.p.Window))
				if per[start] += e.cost; per[start] > tr.p.Limit {
					t.Fatalf("admitted %d in the window starting at %d, limit %d", per[start], start, tr.p.Limit)
				}
			}
		})
	})
	t.Run(string(SlidingCounterName), func(t *testing.T) {
		// Admitted exactly when the estimate, computed from the trace,
		// leaves room: previous·(W-e)/W + current + cost <= limit.
		rapid.Check(t, func(t *rapid.T) {
			tr := drawPropTrace(t, SlidingCounterName)
			w := int64(tr.p.Window)
			per := map[int64]int64{}
			for i, e := range tr.play(t, MustNew(SlidingCounterName, tr.p)) {
				start := align(e.now, w)
				prev, cur := per[start-w], per[start]
				// estimate·W, exactly
				lhs := new(big.Int).Mul(big.NewInt(prev), big.NewInt(w-(e.now-start)))
				lhs.Add(lhs, new(big.Int).Mul(big.NewInt(cur+e.cost), big.NewInt(w)))
				fits := lhs.Cmp(new(big.Int).Mul(big.NewInt(tr.p.Limit), big.NewInt(w))) <= 0
				if e.d.Allowed != fits {
					t.Fatalf("step %d at %d: allowed %v, but the estimate %d·%v/%v + %d + cost %d fits: %v",
						i, e.now, e.d.Allowed, prev, time.Duration(w-(e.now-start)), tr.p.Window, cur, e.cost, fits)
				}
				if e.d.Allowed {
					per[start] += e.cost
				}
			}
		})
	})
}

func admitted(ev []event) []event {
	var out []event
	for _, e := range ev {
		if e.d.Allowed {
			out = append(out, e)
		}
	}
	return out
}

// TestRetryAfterTruthful: after a denial, the same request exactly
// RetryAfter later, with nothing in between, is allowed; and one nanosecond
// earlier it is not, so RetryAfter is the earliest such moment — for every
// algorithm, the sliding counter included (the article's estimate, which
// looks only at the current window, is early whenever that window's count
// still blocks the request in the next one; see DESIGN.md's deliberate
// differences). A cost above the capacity never passes and is left out.
func TestRetryAfterTruthful(t *testing.T) {
	for _, name := range Names {
		t.Run(string(name), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				tr := drawPropTrace(t, name)
				a := MustNew(name, tr.p)
				var (
					state  []byte
					now    = tr.base
					last   Decision
					denied int
				)
				for i, cost := range tr.costs {
					now = tr.step(i, now, last)
					next, d := a.Step(state, now, cost)
					if !d.Allowed {
						denied++
						// Exact for every algorithm: allowed at RetryAfter,
						// denied a nanosecond earlier, for a cost that can
						// ever pass.
						truthful := cost > 0 && cost <= tr.p.Capacity()
						at := now + int64(d.RetryAfter)
						if _, again := a.Step(clone(state), at, cost); truthful && !again.Allowed {
							t.Fatalf("step %d: Step(%d, cost %d) denied with RetryAfter %v, and denied again at %d: %+v",
								i, now, cost, d.RetryAfter, at, again)
						}
						if _, early := a.Step(clone(state), at-1, cost); early.Allowed {
							t.Fatalf("step %d: Step(%d, cost %d) denied with RetryAfter %v, but allowed 1 ns earlier",
								i, now, cost, d.RetryAfter)
						}
					}
					if next != nil {
						state = next
					}
					last = d
				}
			})
		})
	}
}

// clone copies b, keeping nil nil and empty empty.
func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// TestEvictionInvisible: a store may drop a record once its TTL has passed
// (now >= written + TTL) without changing any later answer.
func TestEvictionInvisible(t *testing.T) {
	for _, name := range Names {
		t.Run(string(name), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				tr := drawPropTrace(t, name)
				a := MustNew(name, tr.p)
				var (
					kept, evicted []byte
					expires       int64
					now           = tr.base
					last          Decision
				)
				for i, cost := range tr.costs {
					now = tr.step(i, now, last)
					if evicted != nil && now >= expires {
						evicted = nil
					}
					n1, d1 := a.Step(kept, now, cost)
					n2, d2 := a.Step(evicted, now, cost)
					if d1 != d2 {
						t.Fatalf("step %d: Step(%d, cost %d) = %+v with the record kept, %+v with it evicted", i, now, cost, d1, d2)
					}
					if n1 != nil {
						kept, evicted, expires = n1, n2, now+int64(d1.TTL)
					}
					last = d1
				}
			})
		})
	}
}

// drawBack draws, for each request of a trace, how far the clock steps back
// from where it would be (0 for most requests): a nanosecond or a few, up
// to a window, up to three.
func drawBack(t *rapid.T, tr propTrace) []int64 {
	back := make([]int64, len(tr.costs))
	for i := range back {
		if rapid.IntRange(0, 3).Draw(t, "back?") == 0 {
			back[i] = rapid.OneOf(
				rapid.Int64Range(1, 3),
				rapid.Int64Range(1, int64(tr.p.Window)),
				rapid.Int64Range(1, 3*int64(tr.p.Window)),
			).Draw(t, "back")
		}
	}
	return back
}

// TestClockStepsBack: a clock that steps backwards is treated as not having
// moved. A trace whose clock sometimes steps back never admits more, at any
// point, than the same trace with every such time replaced by the latest
// time seen before it ("no time passed"); and no answer carries a negative
// duration or an undecodable record.
//
// The requests cost 1 here. With mixed costs the two traces' answers part
// at the first denial that depends on the cost, and counts compared after
// that say nothing about refunds (even with no clock trouble at all,
// denying a cost of 1 and then admitting a cost of 2 admits more than the
// other way round). TestClockStepsBackStep covers every cost, one request at
// a time, and TestClockStepsBackPastDenial shows the one case the trace
// comparison cannot cover.
func TestClockStepsBack(t *testing.T) {
	for _, name := range Names {
		t.Run(string(name), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				tr := drawPropTrace(t, name)
				back := drawBack(t, tr)
				a := MustNew(name, tr.p)
				var (
					stepped, held []byte
					fwd           = tr.base // where the clock would be
					latest        = int64(math.MinInt64)
					last          Decision
					nStepped      int64
					nHeld         int64
				)
				for i := range tr.costs {
					fwd = tr.step(i, fwd, last)
					now := fwd - back[i]
					heldAt := max(now, latest)
					latest = heldAt
					n1, d1 := a.Step(stepped, now, 1)
					n2, d2 := a.Step(held, heldAt, 1)
					call := fmt.Sprintf("step %d: Step(%d, cost 1), the latest time %d", i, now, heldAt)
					checkDecision(t, a, call, n1, d1)
					if d1.Allowed {
						nStepped++
					}
					if d2.Allowed {
						nHeld++
					}
					if nStepped > nHeld {
						t.Fatalf("%s: admitted %d with the clock stepping back, %d with it held", call, nStepped, nHeld)
					}
					if n1 != nil {
						stepped = n1
					}
					if n2 != nil {
						held = n2
					}
					last = d1
				}
			})
		})
	}
}

// TestClockStepsBackStep: from any record, a request at a time before the
// latest the trace has seen is never admitted when the same request at that
// latest time would be denied, and given the same verdict, never told it has
// more remaining. Costs are mixed; the trace goes on from the stepped-back
// answer.
func TestClockStepsBackStep(t *testing.T) {
	for _, name := range Names {
		t.Run(string(name), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				tr := drawPropTrace(t, name)
				back := drawBack(t, tr)
				a := MustNew(name, tr.p)
				var (
					state  []byte
					fwd    = tr.base
					latest = int64(math.MinInt64)
					last   Decision
				)
				for i, cost := range tr.costs {
					fwd = tr.step(i, fwd, last)
					now := fwd - back[i]
					heldAt := max(now, latest)
					latest = heldAt
					next, d := a.Step(clone(state), now, cost)
					_, h := a.Step(clone(state), heldAt, cost)
					call := fmt.Sprintf("step %d: Step(%d, cost %d), the latest time %d", i, now, cost, heldAt)
					checkDecision(t, a, call, next, d)
					if d.Allowed && !h.Allowed {
						t.Fatalf("%s: admitted, but denied at the latest time: %+v", call, h)
					}
					if d.Allowed == h.Allowed && d.Remaining > h.Remaining {
						t.Fatalf("%s: Remaining %d, but %d at the latest time", call, d.Remaining, h.Remaining)
					}
					if next != nil {
						state = next
					}
					last = d
				}
			})
		})
	}
}

// TestClockStepsBackPastDenial pins the one limit of "a clock that steps
// back is treated as not having moved": a denial writes nothing, so the
// record only knows the times of admitted requests. When the clock steps
// back from a denied request's time, the record cannot tell; to it, the
// clock never went there. Below, a sliding log of 2 per 10 s denies a cost
// of 2 at 8 s, then the clock steps back to 3 s and a cost of 1 is admitted
// and logged at 3 s. Had the clock held at 8 s, that entry would age out 5 s
// later, and the request at 13.5 s would be denied. Nothing admitted breaks
// the log's own promise on the times it was given (at most 2 in any 10 s);
// the request at 3 s simply counts as made at 3 s.
func TestClockStepsBackPastDenial(t *testing.T) {
	a := MustNew(SlidingLogName, Params{Limit: 2, Window: 10 * time.Second})
	for _, c := range []struct {
		name  string
		times []float64 // seconds
		want  []bool
	}{
		{"stepped back", []float64{0, 8, 3, 11, 13.5}, []bool{true, false, true, true, true}},
		{"held", []float64{0, 8, 8, 11, 13.5}, []bool{true, false, true, true, false}},
	} {
		var state []byte
		for i, sec := range c.times {
			cost := int64(1)
			if i == 1 {
				cost = 2
			}
			next, d := a.Step(state, int64(sec*1e9), cost)
			if d.Allowed != c.want[i] {
				t.Errorf("%s: step %d: Step(%vs, cost %d) = allowed %v, want %v", c.name, i, sec, cost, d.Allowed, c.want[i])
			}
			if next != nil {
				state = next
			}
		}
	}
}

// spentOf returns what a bucket algorithm's record says is spent and not yet
// refilled (or drained), as the fraction num/den of tokens, and the moment
// it says it of: a token bucket's and a leaky bucket's record are about the
// time they were updated; GCRA's, about any time (at), as its debt.
func spentOf(t *rapid.T, a Algorithm, state []byte, at int64) (num, den, when int64) {
	switch a.Name() {
	case TokenBucketName:
		s, err := codec.DecodeTokenBucket(state)
		if err != nil {
			t.Fatalf("token bucket record %x: %v", state, err)
		}
		return s.Spent, unit, s.Updated
	case LeakyBucketName:
		s, err := codec.DecodeBucket(state, codec.TagLeakyBucket)
		if err != nil {
			t.Fatalf("leaky bucket record %x: %v", state, err)
		}
		return s.Level, unit, s.Updated
	case GCRAName:
		s, err := codec.DecodeGCRA(state)
		if err != nil || s.Interval == 0 {
			t.Fatalf("gcra record %x: %+v, %v", state, s, err)
		}
		return until(s.TAT, at), s.Interval, at
	}
	t.Fatalf("%s is not a bucket algorithm", a.Name())
	return 0, 0, 0
}

// floorDiv is floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// TestLimitChangeKeepsSpent: after any trace under one set of parameters,
// the first request under another (a reload that changed the limit, the
// window or the burst) sees what the old record says is spent and not yet
// refilled: with spent s and the new capacity c, it is admitted exactly
// when s + cost <= c, and Remaining is max(0, floor(c - s)) before the
// request, less its cost when admitted. Raising the capacity gives a
// throttled caller the difference at once; lowering it never leaves anyone
// above the new capacity. A denial's RetryAfter stays truthful.
func TestLimitChangeKeepsSpent(t *testing.T) {
	for _, name := range []Name{TokenBucketName, LeakyBucketName, GCRAName} {
		t.Run(string(name), func(tt *testing.T) {
			rapid.Check(tt, func(t *rapid.T) {
				tr := drawPropTrace(t, name)
				a1 := MustNew(name, tr.p)
				var (
					state []byte
					now   = tr.base
					last  Decision
				)
				for i, cost := range tr.costs {
					now = tr.step(i, now, last)
					next, d := a1.Step(state, now, cost)
					if next != nil {
						state = next
					}
					last = d
				}
				if state == nil {
					return // nothing admitted, nothing spent
				}
				p2 := drawParams(t, name)
				if rapid.Bool().Draw(t, "same window") {
					p2.Window = tr.p.Window
				}
				a2 := MustNew(name, p2)
				num, den, at := spentOf(t, a1, state, now+rapid.Int64Range(0, int64(tr.p.Window)).Draw(t, "pause"))
				c2 := p2.Capacity()
				cost := drawCost(t, c2)
				_, d := a2.Step(clone(state), at, cost)

				// room = c2 - num/den, as a fraction over den.
				room := c2*den - num
				fits := room >= cost*den
				want := max(0, floorDiv(room, den))
				if fits {
					want = floorDiv(room-cost*den, den)
				}
				call := fmt.Sprintf("%+v to %+v, spent %d/%d at %d: Step(cost %d)", tr.p, p2, num, den, at, cost)
				if d.Allowed != fits || d.Remaining != want || d.Limit != c2 {
					t.Fatalf("%s = %+v; want allowed %v, remaining %d", call, d, fits, want)
				}
				if !d.Allowed {
					retry := at + int64(d.RetryAfter)
					if _, again := a2.Step(clone(state), retry, cost); !again.Allowed {
						t.Fatalf("%s denied with RetryAfter %v, and denied again then: %+v", call, d.RetryAfter, again)
					}
					if _, early := a2.Step(clone(state), retry-1, cost); early.Allowed {
						t.Fatalf("%s denied with RetryAfter %v, but allowed 1 ns earlier", call, d.RetryAfter)
					}
				}
			})
		})
	}
}
