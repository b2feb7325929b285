package algo_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/codec"
)

// t0 is the fixed start of every timeline: 1,000,000 s after the Unix epoch,
// the instant the article's boundary test sets its clock to. It is a whole
// second, minute and hour, so windows of those lengths start at t0.
const t0 = int64(1_000_000 * time.Second)

// step is one row of a timeline: a request of cost at t0+at and the answer
// it must get. Delay is checked on every row (it is zero except for an
// admitted leaky-bucket request). TTL is checked on admitted rows when set,
// and Reset on denied rows when set; an admitted row's Reset must equal its
// TTL.
type step struct {
	at        time.Duration
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration // RetryAfter of a denied request
	delay     time.Duration
	ttl       time.Duration // checked when allowed and not zero
	reset     time.Duration // checked when denied and not zero
}

// run walks steps in order, feeding each step the record the previous ones
// left, and returns the final record. Failures read like
// "step 3: Step(t0+1s, cost 2) = allowed false, want true".
func run(t *testing.T, a algo.Algorithm, state []byte, steps []step) []byte {
	t.Helper()
	for i, s := range steps {
		next, d := a.Step(state, t0+int64(s.at), s.cost)
		call := fmt.Sprintf("step %d: Step(t0+%v, cost %d)", i, s.at, s.cost)
		if next != nil {
			state = next
		}
		if d.Allowed != s.allowed {
			t.Errorf("%s = allowed %v, want %v (%+v)", call, d.Allowed, s.allowed, d)
			continue
		}
		if !d.Allowed && next != nil {
			t.Errorf("%s denied but returned a record", call)
		}
		if got, want := d.Limit, a.Params().Capacity(); got != want {
			t.Errorf("%s: Limit = %d, want %d", call, got, want)
		}
		if got, want := d.Remaining, s.remaining; got != want {
			t.Errorf("%s: Remaining = %d, want %d", call, got, want)
		}
		if got, want := d.Delay, s.delay; got != want {
			t.Errorf("%s: Delay = %v, want %v", call, got, want)
		}
		if d.CorruptState {
			t.Errorf("%s: CorruptState set on a record Step wrote", call)
		}
		if d.Allowed {
			if d.RetryAfter != 0 {
				t.Errorf("%s: RetryAfter = %v on an admitted request", call, d.RetryAfter)
			}
			if s.ttl != 0 && d.TTL != s.ttl {
				t.Errorf("%s: TTL = %v, want %v", call, d.TTL, s.ttl)
			}
			if d.Reset != d.TTL {
				t.Errorf("%s: Reset = %v, TTL = %v; an admitted request's are equal", call, d.Reset, d.TTL)
			}
			continue
		}
		if got, want := d.RetryAfter, s.retry; got != want {
			t.Errorf("%s: RetryAfter = %v, want %v", call, got, want)
		}
		if s.reset != 0 && d.Reset != s.reset {
			t.Errorf("%s: Reset = %v, want %v", call, d.Reset, s.reset)
		}
	}
	return state
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// burst returns n rows at the same instant, each of cost 1, all admitted,
// with remaining counting down from capacity-1.
func burst(at time.Duration, n, capacity int64) []step {
	var out []step
	for i := range n {
		out = append(out, step{at: at, cost: 1, allowed: true, remaining: capacity - 1 - i})
	}
	return out
}

// TestArticleDemo is the article's demo: limit 5 per second, 7 requests at
// t=0. Every algorithm lets 5 through and denies 2; the buckets say to come
// back in 0.2 s (one token), the fixed window and the log in 1 s. The
// sliding counter says 1.2 s, not the article's 1 s: at 1 s its estimate
// is still 5 (this window's count, now the previous one's, at full
// weight), and a fifth of it has aged out only at 1.2 s.
func TestArticleDemo(t *testing.T) {
	p := algo.Params{Limit: 5, Window: time.Second}
	cases := []struct {
		name  algo.Name
		retry time.Duration
	}{
		{algo.TokenBucketName, ms(200)},
		{algo.LeakyBucketName, ms(200)},
		{algo.FixedWindowName, time.Second},
		{algo.SlidingLogName, time.Second},
		{algo.SlidingCounterName, ms(1200)},
		{algo.GCRAName, ms(200)},
	}
	for _, c := range cases {
		t.Run(string(c.name), func(t *testing.T) {
			a := algo.MustNew(c.name, p)
			var state []byte
			allowed, denied := 0, 0
			var last algo.Decision
			for range 7 {
				var next []byte
				next, last = a.Step(state, t0, 1)
				if next != nil {
					state = next
				}
				if last.Allowed {
					allowed++
				} else {
					denied++
				}
			}
			if allowed != 5 || denied != 2 {
				t.Errorf("%d allowed, %d denied; want 5, 2", allowed, denied)
			}
			if last.RetryAfter != c.retry {
				t.Errorf("RetryAfter = %v, want %v", last.RetryAfter, c.retry)
			}
		})
	}
}

// TestArticleDemoSteps is the same demo, row by row, with what each row
// must carry besides the verdict.
func TestArticleDemoSteps(t *testing.T) {
	p := algo.Params{Limit: 5, Window: time.Second}
	denied := func(retry, reset time.Duration) []step {
		return []step{
			{cost: 1, retry: retry, reset: reset},
			{cost: 1, retry: retry, reset: reset},
		}
	}
	// ttls returns the five admitted rows with the given TTLs.
	ttls := func(ttl ...time.Duration) []step {
		out := burst(0, 5, 5)
		for i := range out {
			out[i].ttl = ttl[i]
		}
		return out
	}
	cases := map[algo.Name][]step{
		// Time until full: one token per 0.2 s missing.
		algo.TokenBucketName: append(ttls(ms(200), ms(400), ms(600), ms(800), ms(1000)), denied(ms(200), time.Second)...),
		algo.GCRAName:        append(ttls(ms(200), ms(400), ms(600), ms(800), ms(1000)), denied(ms(200), time.Second)...),
		// The window ends 1 s after t0, which is aligned.
		algo.FixedWindowName: append(ttls(time.Second, time.Second, time.Second, time.Second, time.Second), denied(time.Second, time.Second)...),
		// The newest entry plus the window.
		algo.SlidingLogName: append(ttls(time.Second, time.Second, time.Second, time.Second, time.Second), denied(time.Second, time.Second)...),
		// The end of the next window: this window's count weighs on it,
		// and a fifth of it has aged out 1.2 s after t0.
		algo.SlidingCounterName: append(ttls(2*time.Second, 2*time.Second, 2*time.Second, 2*time.Second, 2*time.Second), denied(ms(1200), 2*time.Second)...),
	}
	for name, steps := range cases {
		t.Run(string(name), func(t *testing.T) { run(t, algo.MustNew(name, p), nil, steps) })
	}
	t.Run(string(algo.LeakyBucketName), func(t *testing.T) {
		// The article: delay = level/rate before the cost is added, so the
		// burst leaves at 0, 0.2, 0.4, 0.6 and 0.8 s.
		run(t, algo.MustNew(algo.LeakyBucketName, p), nil, []step{
			{cost: 1, allowed: true, remaining: 4, delay: 0, ttl: ms(200)},
			{cost: 1, allowed: true, remaining: 3, delay: ms(200), ttl: ms(400)},
			{cost: 1, allowed: true, remaining: 2, delay: ms(400), ttl: ms(600)},
			{cost: 1, allowed: true, remaining: 1, delay: ms(600), ttl: ms(800)},
			{cost: 1, allowed: true, remaining: 0, delay: ms(800), ttl: time.Second},
			{cost: 1, retry: ms(200), reset: time.Second},
			{cost: 1, retry: ms(200), reset: time.Second},
		})
	})
}

// TestBoundaryBurst is the article's comparison: 5 requests at t+0.9 s and 5
// more at t+1.0 s. The fixed window lets all 10 through within 0.1 s; the
// sliding counter still counts the previous window and lets none.
func TestBoundaryBurst(t *testing.T) {
	p := algo.Params{Limit: 5, Window: time.Second}
	t.Run(string(algo.FixedWindowName), func(t *testing.T) {
		steps := append(burst(ms(900), 5, 5), burst(ms(1000), 5, 5)...)
		for i := range steps {
			steps[i].ttl = time.Second - steps[i].at%time.Second
		}
		run(t, algo.MustNew(algo.FixedWindowName, p), nil, steps)
	})
	t.Run(string(algo.SlidingCounterName), func(t *testing.T) {
		steps := burst(ms(900), 5, 5)
		for range 5 {
			// Estimate 5·(1-0)+0 = 5: no room. The request fits once 1 of
			// the 5 has aged out: 5·(1-e) <= 4 at e = 0.2 s.
			steps = append(steps, step{at: ms(1000), cost: 1, retry: ms(200), reset: time.Second})
		}
		steps = append(steps,
			step{at: ms(1200) - 1, cost: 1, retry: time.Nanosecond},
			step{at: ms(1200), cost: 1, allowed: true, remaining: 0, ttl: ms(1800)},
		)
		run(t, algo.MustNew(algo.SlidingCounterName, p), nil, steps)
	})
}

// TestTokenBucket: a burst up to the capacity, then the sustained rate, and
// a RetryAfter that is exact to the nanosecond.
func TestTokenBucket(t *testing.T) {
	t.Run("burst then rate", func(t *testing.T) {
		// 60 per minute with a burst of 10: capacity 10, one token a second.
		a := algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 60, Window: time.Minute, Burst: 10})
		steps := burst(0, 10, 10)
		for i := range steps {
			steps[i].ttl = time.Duration(i+1) * time.Second // until full
		}
		steps = append(steps,
			step{at: 0, cost: 1, retry: time.Second, reset: 10 * time.Second},
			step{at: ms(500), cost: 1, retry: ms(500), reset: ms(9500)},
			step{at: time.Second, cost: 1, allowed: true, remaining: 0, ttl: 10 * time.Second},
			step{at: time.Second, cost: 1, retry: time.Second},
			step{at: 2 * time.Second, cost: 3, remaining: 1, retry: 2 * time.Second, reset: 9 * time.Second},
			step{at: 4 * time.Second, cost: 3, allowed: true, remaining: 0, ttl: 10 * time.Second},
			// Idle for longer than a refill: full again, and no fuller.
			step{at: 30 * time.Second, cost: 10, allowed: true, remaining: 0, ttl: 10 * time.Second},
			step{at: 30 * time.Second, cost: 1, retry: time.Second, reset: 10 * time.Second},
		)
		run(t, a, nil, steps)
	})
	t.Run("exact retry", func(t *testing.T) {
		// 3 per second: a token every 333,333,333⅓ ns.
		a := algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 3, Window: time.Second})
		steps := append(burst(0, 3, 3),
			step{at: 0, cost: 1, retry: 333_333_334},
			step{at: 333_333_333, cost: 1, retry: 1},                    // 0.999999999 tokens
			step{at: 333_333_334, cost: 1, allowed: true, remaining: 0}, // 1.000000002
			step{at: 333_333_334, cost: 1, retry: 333_333_333},          // 0.000000002 left
			step{at: 666_666_666, cost: 1, retry: 1},                    // 0.999999998
			step{at: 666_666_667, cost: 1, allowed: true, remaining: 0}, // 1.000000001
		)
		run(t, a, nil, steps)
	})
}

// TestLeakyBucket: each admitted request waits for the work queued ahead of
// it (the article: delay = level/rate before adding the cost).
func TestLeakyBucket(t *testing.T) {
	a := algo.MustNew(algo.LeakyBucketName, algo.Params{Limit: 5, Window: time.Second})
	run(t, a, nil, []step{
		{cost: 1, allowed: true, remaining: 4, delay: 0, ttl: ms(200)},
		{cost: 3, allowed: true, remaining: 1, delay: ms(200), ttl: ms(800)},
		{cost: 1, allowed: true, remaining: 0, delay: ms(800), ttl: time.Second},
		// 0.1 s later 0.5 has drained: room 0.5, short by 0.5.
		{at: ms(100), cost: 1, retry: ms(100), reset: ms(900)},
		{at: ms(200), cost: 1, allowed: true, remaining: 0, delay: ms(800), ttl: time.Second},
		{at: ms(200), cost: 2, retry: ms(400), reset: time.Second},
		// Drained completely: no delay.
		{at: ms(1200), cost: 1, allowed: true, remaining: 4, delay: 0, ttl: ms(200)},
		{at: ms(1300), cost: 5, remaining: 4, retry: ms(100), reset: ms(100)},
		{at: ms(1300), cost: 4, allowed: true, remaining: 0, delay: ms(100), ttl: ms(900)},
	})
	t.Run("burst", func(t *testing.T) {
		// A burst (the capacity) larger than the limit, draining at limit/window.
		a := algo.MustNew(algo.LeakyBucketName, algo.Params{Limit: 2, Window: time.Second, Burst: 4})
		run(t, a, nil, []step{
			{cost: 4, allowed: true, remaining: 0, delay: 0, ttl: 2 * time.Second},
			{cost: 1, retry: ms(500), reset: 2 * time.Second},
			{at: ms(500), cost: 1, allowed: true, remaining: 0, delay: ms(1500), ttl: 2 * time.Second},
		})
	})
}

// TestGCRA is the token bucket kept as one time: the same answers for whole
// intervals, and a burst of exactly the capacity even when the interval is
// not a whole number of nanoseconds.
func TestGCRA(t *testing.T) {
	t.Run("burst then rate", func(t *testing.T) {
		a := algo.MustNew(algo.GCRAName, algo.Params{Limit: 60, Window: time.Minute, Burst: 10})
		steps := burst(0, 10, 10)
		for i := range steps {
			steps[i].ttl = time.Duration(i+1) * time.Second
		}
		steps = append(steps,
			step{at: 0, cost: 1, retry: time.Second, reset: 10 * time.Second},
			step{at: ms(500), cost: 1, retry: ms(500), reset: ms(9500)},
			step{at: time.Second, cost: 1, allowed: true, remaining: 0, ttl: 10 * time.Second},
			step{at: 2 * time.Second, cost: 3, remaining: 1, retry: 2 * time.Second, reset: 9 * time.Second},
			step{at: 4 * time.Second, cost: 3, allowed: true, remaining: 0, ttl: 10 * time.Second},
			step{at: 30 * time.Second, cost: 10, allowed: true, remaining: 0, ttl: 10 * time.Second},
		)
		run(t, a, nil, steps)
	})
	t.Run("interval not whole ns", func(t *testing.T) {
		// 3 per second: the interval rounds up to 333,333,334 ns, so the
		// bucket refills a token every 333,333,334 ns, and a burst of 3
		// still passes at once.
		a := algo.MustNew(algo.GCRAName, algo.Params{Limit: 3, Window: time.Second})
		run(t, a, nil, append(burst(0, 3, 3),
			step{at: 0, cost: 1, retry: 333_333_334, reset: 1_000_000_002},
			step{at: 333_333_333, cost: 1, retry: 1},
			step{at: 333_333_334, cost: 1, allowed: true, remaining: 0, ttl: 1_000_000_002},
		))
	})
}

// TestFixedWindow: the count resets at each window boundary, whatever is
// left of the window.
func TestFixedWindow(t *testing.T) {
	a := algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 3, Window: time.Second})
	run(t, a, nil, []step{
		{at: ms(100), cost: 2, allowed: true, remaining: 1, ttl: ms(900)},
		{at: ms(500), cost: 2, remaining: 1, retry: ms(500), reset: ms(500)},
		{at: time.Second - 1, cost: 1, allowed: true, remaining: 0, ttl: 1},
		{at: time.Second - 1, cost: 1, remaining: 0, retry: 1},
		{at: ms(1000), cost: 3, allowed: true, remaining: 0, ttl: time.Second},
		// Two windows on, the count is gone.
		{at: ms(3500), cost: 1, allowed: true, remaining: 2, ttl: ms(500)},
	})
}

// TestSlidingLog: RetryAfter points at the moment the oldest entry that must
// go has aged out.
func TestSlidingLog(t *testing.T) {
	a := algo.MustNew(algo.SlidingLogName, algo.Params{Limit: 3, Window: time.Second})
	run(t, a, nil, []step{
		{at: 0, cost: 1, allowed: true, remaining: 2, ttl: time.Second},
		{at: ms(200), cost: 1, allowed: true, remaining: 1, ttl: time.Second},
		{at: ms(400), cost: 1, allowed: true, remaining: 0, ttl: time.Second},
		// The entry at 0 ages out at 1 s, the one at 200 ms at 1.2 s, ...
		{at: ms(600), cost: 1, retry: ms(400), reset: ms(800)},
		{at: ms(600), cost: 2, retry: ms(600), reset: ms(800)},
		{at: ms(600), cost: 3, retry: ms(800), reset: ms(800)},
		{at: time.Second - 1, cost: 1, retry: 1},
		// An entry exactly a window old has aged out.
		{at: ms(1000), cost: 1, allowed: true, remaining: 0, ttl: time.Second},
		{at: ms(1000), cost: 1, retry: ms(200)},
		{at: ms(1400), cost: 2, allowed: true, remaining: 0, ttl: time.Second},
		{at: ms(1400), cost: 1, retry: ms(600), reset: time.Second},
	})
	t.Run("remaining on a denial", func(t *testing.T) {
		// A denial reports what is left, as every algorithm does: with
		// one of two spent, a cost of 2 is refused with 1 left, and a
		// cost of 1 then takes it.
		run(t, algo.MustNew(algo.SlidingLogName, algo.Params{Limit: 2, Window: time.Second}), nil, []step{
			{at: 0, cost: 1, allowed: true, remaining: 1, ttl: time.Second},
			{at: 0, cost: 2, remaining: 1, retry: time.Second, reset: time.Second},
			{at: 0, cost: 1, allowed: true, remaining: 0, ttl: time.Second},
		})
	})
	t.Run("nanoseconds", func(t *testing.T) {
		// Entries a nanosecond apart age out a nanosecond apart, exactly a
		// window after each, however long the window.
		for _, w := range []time.Duration{time.Millisecond, time.Second, time.Hour, 24 * time.Hour} {
			a := algo.MustNew(algo.SlidingLogName, algo.Params{Limit: 2, Window: w})
			run(t, a, nil, []step{
				{at: 0, cost: 1, allowed: true, remaining: 1, ttl: w},
				{at: 1, cost: 1, allowed: true, remaining: 0, ttl: w},
				{at: w - 1, cost: 1, retry: 1, reset: 2},
				{at: w, cost: 2, remaining: 1, retry: 1, reset: 1},
				{at: w, cost: 1, allowed: true, remaining: 0, ttl: w},
				{at: w, cost: 1, retry: 1, reset: w},
				{at: w + 1, cost: 1, allowed: true, remaining: 0, ttl: w},
			})
		}
	})
}

// TestSlidingCounter: the estimate weighs the previous window by its
// overlap, and RetryAfter solves for when enough of it has aged out (the
// article's formula), or points at the next window when the current one
// alone is too full.
func TestSlidingCounter(t *testing.T) {
	a := algo.MustNew(algo.SlidingCounterName, algo.Params{Limit: 10, Window: time.Second})
	run(t, a, nil, []step{
		{at: ms(500), cost: 8, allowed: true, remaining: 2, ttl: ms(1500)},
		// Next window: previous 8 at full weight, count 0.
		{at: ms(1000), cost: 2, allowed: true, remaining: 0, ttl: 2 * time.Second},
		// room = 10-2-1 = 7 of the previous 8: 8·(1-e) <= 7 at e = 0.125 s.
		{at: ms(1000), cost: 1, remaining: 0, retry: ms(125), reset: 2 * time.Second},
		{at: ms(1125) - 1, cost: 1, remaining: 0, retry: 1},
		{at: ms(1125), cost: 1, allowed: true, remaining: 0, ttl: ms(1875)},
		// Half way: estimate 8·0.5+3 = 7. A cost of 3 fits, 4 does not:
		// room 10-3-4 = 3, 8·(1-e) <= 3 at e = 0.625 s.
		{at: ms(1500), cost: 4, remaining: 3, retry: ms(125)},
		// The current window alone has room 0 for a cost of 7: only the
		// next window helps.
		{at: ms(1500), cost: 7, remaining: 3, retry: ms(500)},
		// The current window alone is too full (3+8 > 10). In the next
		// window the 3 are the previous count: 3·(1-e)+8 <= 10 from
		// e = 1/3 s, rounded up to the nanosecond (the article says the
		// next window's start, where 3+8 > 10 still).
		{at: ms(1500), cost: 8, remaining: 3, retry: 833333334},
		{at: ms(2000), cost: 7, allowed: true, remaining: 0, ttl: 2 * time.Second},
		// Two windows on, nothing is carried.
		{at: ms(4000), cost: 10, allowed: true, remaining: 0, ttl: 2 * time.Second},
	})
}

// TestCost: a cost the capacity can never hold, and a cost of zero or less,
// are errors to CheckCost, and denials that change nothing to Step.
func TestCost(t *testing.T) {
	for _, name := range algo.Names {
		t.Run(string(name), func(t *testing.T) {
			p := algo.Params{Limit: 5, Window: time.Second}
			if name == algo.TokenBucketName || name == algo.LeakyBucketName || name == algo.GCRAName {
				p.Burst = 7
			}
			a := algo.MustNew(name, p)
			for _, c := range []struct {
				cost int64
				want error
			}{
				{1, nil},
				{a.Params().Capacity(), nil},
				{a.Params().Capacity() + 1, algo.ErrCostExceedsCapacity},
				{1 << 62, algo.ErrCostExceedsCapacity},
				{0, algo.ErrInvalidCost},
				{-1, algo.ErrInvalidCost},
				{-1 << 63, algo.ErrInvalidCost},
			} {
				err := algo.CheckCost(a, c.cost)
				if !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
					t.Errorf("CheckCost(%d) = %v, want %v", c.cost, err, c.want)
				}
				if c.want == nil {
					continue
				}
				// Against a fresh record and a used one: denied, nothing written.
				state, _ := a.Step(nil, t0, 1)
				for _, rec := range [][]byte{nil, state} {
					before := string(rec)
					next, d := a.Step(rec, t0, c.cost)
					if d.Allowed || next != nil {
						t.Errorf("Step(cost %d) = allowed %v, record %x; want a denial writing nothing", c.cost, d.Allowed, next)
					}
					if d.RetryAfter < 0 || d.Remaining < 0 || d.Delay != 0 {
						t.Errorf("Step(cost %d) = %+v", c.cost, d)
					}
					if string(rec) != before {
						t.Errorf("Step(cost %d) changed the record it was given", c.cost)
					}
				}
			}
		})
	}
}

// TestNewValidation: every invalid parameter is a *ParamError naming its
// field and wrapping ErrInvalidParams.
func TestNewValidation(t *testing.T) {
	cases := []struct {
		name  string
		algo  algo.Name
		p     algo.Params
		field string
	}{
		{"zero limit", algo.TokenBucketName, algo.Params{Window: time.Second}, "limit"},
		{"negative limit", algo.FixedWindowName, algo.Params{Limit: -1, Window: time.Second}, "limit"},
		{"limit too large", algo.SlidingCounterName, algo.Params{Limit: algo.MaxLimit + 1, Window: time.Second}, "limit"},
		{"zero window", algo.LeakyBucketName, algo.Params{Limit: 1}, "window"},
		{"negative window", algo.GCRAName, algo.Params{Limit: 1, Window: -time.Second}, "window"},
		{"window too long", algo.SlidingLogName, algo.Params{Limit: 1, Window: algo.MaxWindow + 1}, "window"},
		{"negative burst", algo.TokenBucketName, algo.Params{Limit: 1, Window: time.Second, Burst: -1}, "burst"},
		{"burst too large", algo.GCRAName, algo.Params{Limit: 1, Window: time.Second, Burst: algo.MaxLimit + 1}, "burst"},
		{"burst too slow to refill", algo.TokenBucketName, algo.Params{Limit: 1, Window: algo.MaxWindow, Burst: 100}, "burst"},
		{"burst on fixed_window", algo.FixedWindowName, algo.Params{Limit: 1, Window: time.Second, Burst: 2}, "burst"},
		{"burst on sliding_log", algo.SlidingLogName, algo.Params{Limit: 1, Window: time.Second, Burst: 2}, "burst"},
		{"burst on sliding_counter", algo.SlidingCounterName, algo.Params{Limit: 1, Window: time.Second, Burst: 2}, "burst"},
		{"sliding_log too long", algo.SlidingLogName, algo.Params{Limit: algo.MaxSlidingLogLimit + 1, Window: time.Second}, "limit"},
		{"gcra under a nanosecond per token", algo.GCRAName, algo.Params{Limit: 1001, Window: time.Microsecond}, "limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := algo.New(c.algo, c.p)
			if err == nil {
				t.Fatalf("New(%q, %+v) = %v, want an error", c.algo, c.p, a)
			}
			var pe *algo.ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("New(%q, %+v) error %v (%T) is not a *ParamError", c.algo, c.p, err, err)
			}
			if pe.Field != c.field {
				t.Errorf("New(%q, %+v) error names field %q, want %q (%v)", c.algo, c.p, pe.Field, c.field, err)
			}
			if !errors.Is(err, algo.ErrInvalidParams) {
				t.Errorf("New(%q, %+v) error %v does not wrap ErrInvalidParams", c.algo, c.p, err)
			}
		})
	}
	t.Run("unknown algorithm", func(t *testing.T) {
		for _, name := range []algo.Name{"", "token-bucket", "Token_Bucket", "leaky"} {
			_, err := algo.New(name, algo.Params{Limit: 1, Window: time.Second})
			if !errors.Is(err, algo.ErrUnknownAlgorithm) {
				t.Errorf("New(%q) error = %v, want ErrUnknownAlgorithm", name, err)
			}
		}
	})
	t.Run("valid", func(t *testing.T) {
		for _, name := range algo.Names {
			for _, p := range []algo.Params{
				{Limit: 1, Window: 1},
				{Limit: 1, Window: algo.MaxWindow},
				{Limit: 1000, Window: time.Microsecond},
			} {
				a, err := algo.New(name, p)
				if err != nil {
					t.Errorf("New(%q, %+v) = %v", name, p, err)
					continue
				}
				if a.Name() != name || a.Params() != p {
					t.Errorf("New(%q, %+v) built %q with %+v", name, p, a.Name(), a.Params())
				}
			}
		}
		for _, name := range []algo.Name{algo.TokenBucketName, algo.LeakyBucketName, algo.GCRAName} {
			p := algo.Params{Limit: 60, Window: time.Minute, Burst: 10}
			a, err := algo.New(name, p)
			if err != nil {
				t.Fatalf("New(%q, %+v) = %v", name, p, err)
			}
			if got := a.Params().Capacity(); got != 10 {
				t.Errorf("%s capacity = %d, want the burst 10", name, got)
			}
		}
	})
}

// TestWindowAlignment: windows are whole multiples of the window length
// counted from the Unix epoch, also for lengths that do not divide a day and
// for times before 1970.
func TestWindowAlignment(t *testing.T) {
	for _, c := range []struct {
		window time.Duration
		now    int64
		start  int64 // the window holding now
	}{
		{7 * time.Second, 0, 0},
		{7 * time.Second, 6_999_999_999, 0},
		{7 * time.Second, 7e9, 7e9},
		{7 * time.Second, 1_700_000_000e9, 1_699_999_994e9}, // 1.7e9 = 7·242857142 + 6
		{7 * time.Second, -1, -7e9},
		{7 * time.Second, -7e9, -7e9},
		{7 * time.Second, -7e9 - 1, -14e9},
		{7 * time.Minute, 1_700_000_000e9, 1_699_999_980e9}, // 420·4047619 = 1_699_999_980
		{7 * time.Minute, -1e9, -420e9},
		{time.Hour, -1, -3600e9},
	} {
		name := fmt.Sprintf("%v at %d", c.window, c.now)
		reset := time.Duration(c.start + int64(c.window) - c.now)
		for _, algoName := range []algo.Name{algo.FixedWindowName, algo.SlidingCounterName} {
			a := algo.MustNew(algoName, algo.Params{Limit: 2, Window: c.window})
			state, d := a.Step(nil, c.now, 2)
			if !d.Allowed {
				t.Fatalf("%s %s: fresh request denied", algoName, name)
			}
			want := reset
			if algoName == algo.SlidingCounterName {
				want += c.window // the count weighs on the next window too
			}
			if d.TTL != want {
				t.Errorf("%s %s: TTL = %v, want %v", algoName, name, d.TTL, want)
			}
			// The last nanosecond of the window is still full...
			if _, d := a.Step(state, c.start+int64(c.window)-1, 1); d.Allowed {
				t.Errorf("%s %s: admitted in the last nanosecond of the full window", algoName, name)
			}
			// ...and the first of the next is a new window.
			_, d = a.Step(state, c.start+int64(c.window), 2)
			if algoName == algo.FixedWindowName && !d.Allowed {
				t.Errorf("%s %s: denied at the start of the next window", algoName, name)
			}
			if algoName == algo.SlidingCounterName && (d.Allowed || d.RetryAfter != c.window) {
				// At the very start of the next window the previous one
				// still counts in full; it has aged out a window later.
				t.Errorf("%s %s: at the next window %+v, want denied with RetryAfter %v", algoName, name, d, c.window)
			}
		}
	}
}

// TestNegativeTime: every algorithm works the same before the epoch as after.
func TestNegativeTime(t *testing.T) {
	for _, name := range algo.Names {
		t.Run(string(name), func(t *testing.T) {
			a := algo.MustNew(name, algo.Params{Limit: 3, Window: 7 * time.Second})
			stepAt := func(base int64) []bool {
				var state []byte
				var out []bool
				for _, off := range []int64{0, 1e9, 2e9, 3e9, 8e9, 9e9, 9e9, 16e9} {
					next, d := a.Step(state, base+off, 1)
					if next != nil {
						state = next
					}
					out = append(out, d.Allowed)
				}
				return out
			}
			// Both bases are window starts, so the windows line up.
			pos, neg := stepAt(7e9*1000), stepAt(-7e9*1000)
			if fmt.Sprint(pos) != fmt.Sprint(neg) {
				t.Errorf("after the epoch %v, before it %v", pos, neg)
			}
		})
	}
}

// TestCapacityLowered: a record written under a larger capacity (a hot
// reload lowering the limit) keeps what was spent and is never a refund.
func TestCapacityLowered(t *testing.T) {
	high := algo.Params{Limit: 10, Window: time.Second}
	low := algo.Params{Limit: 4, Window: time.Second}
	cases := []struct {
		name     algo.Name
		spend    int64 // under high, at t0
		at       time.Duration
		cost     int64 // under low, at t0+at
		want     bool
		retry    time.Duration
		remain   int64
		wantNext bool
	}{
		// A full bucket of 10 holds 4 under the new capacity.
		{algo.TokenBucketName, 0, 0, 1, true, 0, 3, true},
		// 8 spent: more than the new capacity, so nothing is left until
		// 5 have refilled at 4/s (for a cost of 1), or 7 (a cost of 3).
		{algo.TokenBucketName, 8, 0, 3, false, ms(1750), 0, false},
		{algo.TokenBucketName, 8, ms(1250), 1, true, 0, 0, true},
		// 10 queued over a capacity of 4: drains at 4/s; a cost of 1 fits
		// once 7 have drained.
		{algo.LeakyBucketName, 10, 0, 1, false, ms(1750), 0, false},
		{algo.LeakyBucketName, 10, ms(1750), 1, true, 0, 0, true},
		// GCRA: the TAT is 10 intervals of 100 ms ahead: 10 tokens spent,
		// 2.5 s at 4/s, over a tolerance of 4 intervals of 250 ms. The
		// record keeps refilling at the rate it was spent at (10/s) until
		// an admission writes it anew: room for 1 once 7 of the 10 are
		// back, 700 ms later.
		{algo.GCRAName, 10, 0, 1, false, ms(700), 0, false},
		{algo.GCRAName, 10, ms(700), 1, true, 0, 0, true},
		{algo.FixedWindowName, 10, ms(500), 1, false, ms(500), 0, false},
		{algo.FixedWindowName, 10, ms(1000), 4, true, 0, 0, true},
		// 6 in this window, over the new 4: in the next they weigh
		// 6·(1-e), and 6·(1-e)+1 <= 4 from e = 0.5 s.
		{algo.SlidingCounterName, 6, ms(500), 1, false, time.Second, 0, false},
		// The log holds 6 entries at t0; 6+1-4-1 = 2: the third must go.
		{algo.SlidingLogName, 6, ms(500), 1, false, ms(500), 0, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s spent %d", c.name, c.spend), func(t *testing.T) {
			var state []byte
			if c.spend > 0 {
				state, _ = algo.MustNew(c.name, high).Step(nil, t0, c.spend)
			} else {
				// A full token bucket written under the high capacity.
				state, _ = algo.MustNew(c.name, high).Step(nil, t0-int64(time.Hour), 1)
			}
			a := algo.MustNew(c.name, low)
			next, d := a.Step(state, t0+int64(c.at), c.cost)
			if d.Allowed != c.want || d.Remaining != c.remain || (!d.Allowed && d.RetryAfter != c.retry) {
				t.Errorf("Step = %+v, want allowed %v, remaining %d, retry %v", d, c.want, c.remain, c.retry)
			}
			if d.Remaining > low.Limit || d.Limit != low.Limit {
				t.Errorf("Step = %+v: remaining and limit must be within the new capacity", d)
			}
			if (next != nil) != c.wantNext {
				t.Errorf("Step returned record %x", next)
			}
			if d.CorruptState {
				t.Errorf("a record of the same algorithm was reported corrupt")
			}
		})
	}
}

// TestForeignRecord: a record of another algorithm, another version, or
// bytes that do not decode, read as no record at all; CorruptState is set
// for all but another algorithm's valid record (a rule whose algorithm
// changed), which is not corrupt.
func TestForeignRecord(t *testing.T) {
	p := algo.Params{Limit: 3, Window: time.Second}
	records := map[algo.Name][]byte{}
	for _, name := range algo.Names {
		rec, _ := algo.MustNew(name, p).Step(nil, t0, 2)
		records[name] = rec
	}
	bad := map[string][]byte{
		"one byte":   {0x11},
		"version 3":  {0x31, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"version 0":  {0x06, 0, 0, 0, 0, 0, 0, 0, 0},
		"unknown":    {0x1f, 0, 0, 0, 0, 0, 0, 0, 0},
		"all ones":   {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"text":       []byte("token_bucket"),
		"negative":   {0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0, 0, 0}, // level < 0
		"truncated8": {0x16, 0, 0, 0, 0, 0, 0, 0},
	}
	for _, name := range algo.Names {
		a := algo.MustNew(name, p)
		_, fresh := a.Step(nil, t0+int64(ms(10)), 1)
		check := func(what string, rec []byte, corrupt bool) {
			t.Helper()
			rec = append(make([]byte, 0, len(rec)), rec...) // empty stays non-nil
			next, d := a.Step(rec, t0+int64(ms(10)), 1)
			if d.CorruptState != corrupt {
				t.Errorf("%s reading %s: CorruptState %v, want %v", name, what, d.CorruptState, corrupt)
			}
			d.CorruptState = false
			if d != fresh {
				t.Errorf("%s reading %s: %+v, want the fresh answer %+v", name, what, d, fresh)
			}
			if _, again := a.Step(next, t0+int64(ms(10)), 1); again.CorruptState {
				t.Errorf("%s reading %s: the record it wrote does not decode", name, what)
			}
		}
		for other, rec := range records {
			if other != name {
				check(string(other)+" record", rec, false)
				if other == algo.SlidingLogName {
					continue // a log cut short or grown by a byte may be another valid log
				}
				// The same record cut short or with a byte more is corrupt.
				check(string(other)+" record, truncated", rec[:len(rec)-1], true)
				check(string(other)+" record, trailing byte", append(append([]byte(nil), rec...), 0), true)
			}
		}
		for what, rec := range bad {
			check(what, rec, true)
		}
	}
	// An empty record, with or without spare capacity, is no record: the
	// fresh answer, not corrupt.
	for _, name := range algo.Names {
		a := algo.MustNew(name, p)
		_, fresh := a.Step(nil, t0, 1)
		if _, d := a.Step(make([]byte, 0, 64), t0, 1); d != fresh {
			t.Errorf("%s over an empty record: %+v, want the fresh answer %+v", name, d, fresh)
		}
	}
	// The headers above are what the codec says they are.
	if v, tag, _ := codec.Header(records[algo.GCRAName]); v != codec.Latest(codec.TagGCRA) || tag != codec.TagGCRA {
		t.Errorf("gcra record header = version %d tag %v", v, tag)
	}
}

// TestStepInPlace: a record that keeps its size is rewritten in its own
// backing array, so the hot path does not allocate.
func TestStepInPlace(t *testing.T) {
	for _, name := range algo.Names {
		if name == algo.SlidingLogName {
			continue // the log grows and shrinks
		}
		a := algo.MustNew(name, algo.Params{Limit: 100, Window: time.Second})
		state, _ := a.Step(nil, t0, 1)
		next, d := a.Step(state, t0+1, 1)
		if !d.Allowed || &next[0] != &state[0] {
			t.Errorf("%s: second step allowed %v, wrote in place %v", name, d.Allowed, &next[0] == &state[0])
		}
		if allocs := testing.AllocsPerRun(100, func() { a.Step(state, t0+2, 1) }); allocs != 0 {
			t.Errorf("%s: %v allocations per step", name, allocs)
		}
	}
}

// ExampleNew builds an algorithm from configuration and asks it one question.
func ExampleNew() {
	a, err := algo.New("token_bucket", algo.Params{Limit: 60, Window: time.Minute, Burst: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, d := a.Step(nil, 0, 1)
	fmt.Println(a.Name(), d.Allowed, d.Limit, d.Remaining)

	_, err = algo.New("fixed_window", algo.Params{Limit: 60, Window: time.Minute, Burst: 10})
	fmt.Println(err)
	// Output:
	// token_bucket true 10 9
	// burst: fixed_window does not take a burst (only token_bucket, leaky_bucket and gcra do)
}

// ExampleAlgorithm_Step walks the article's demo: 5 per second, 7 requests
// at once. The caller keeps the record Step returns (a store would).
func ExampleAlgorithm_Step() {
	a := algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 5, Window: time.Second})
	var record []byte // nil: a key never seen
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range 7 {
		next, d := a.Step(record, now, 1)
		if next != nil {
			record = next
		}
		if d.Allowed {
			fmt.Printf("request %d: allowed, %d remaining\n", i+1, d.Remaining)
		} else {
			fmt.Printf("request %d: denied, retry after %v\n", i+1, d.RetryAfter)
		}
	}
	// A fifth of a second later one token has come back.
	_, d := a.Step(record, now+int64(200*time.Millisecond), 1)
	fmt.Println("0.2 s later:", d.Allowed)
	// Output:
	// request 1: allowed, 4 remaining
	// request 2: allowed, 3 remaining
	// request 3: allowed, 2 remaining
	// request 4: allowed, 1 remaining
	// request 5: allowed, 0 remaining
	// request 6: denied, retry after 200ms
	// request 7: denied, retry after 200ms
	// 0.2 s later: true
}

// ExampleCheckCost shows the errors a caller reports before stepping.
func ExampleCheckCost() {
	a := algo.MustNew(algo.SlidingLogName, algo.Params{Limit: 5, Window: time.Minute})
	fmt.Println(algo.CheckCost(a, 5))
	fmt.Println(algo.CheckCost(a, 6))
	fmt.Println(algo.CheckCost(a, 0))
	// Output:
	// <nil>
	// sluice/algo: cost exceeds capacity: cost 6 can never fit a capacity of 5
	// sluice/algo: cost must be positive: got 0
}

// TestRemainingOnDenial: every algorithm reports on a denial what is left
// now, so a client that asked for too much learns what it may still ask
// for: limit 2, one spent, a cost of 2 is refused with 1 left.
func TestRemainingOnDenial(t *testing.T) {
	for _, name := range algo.Names {
		t.Run(string(name), func(t *testing.T) {
			a := algo.MustNew(name, algo.Params{Limit: 2, Window: time.Hour})
			state, d := a.Step(nil, t0, 1)
			if !d.Allowed || d.Remaining != 1 {
				t.Fatalf("the first request: %+v", d)
			}
			if _, d = a.Step(state, t0, 2); d.Allowed || d.Remaining != 1 {
				t.Errorf("a cost of 2 with 1 left: %+v, want denied with remaining 1", d)
			}
		})
	}
}

// TestQuota: the quota policy the IETF fields state. The quota is the
// capacity; the window is a window algorithm's own, and for a bucket the
// time the whole capacity takes to come back; the reset of an allowed
// answer never passes that window, and a denial's is its RetryAfter.
func TestQuota(t *testing.T) {
	for _, c := range []struct {
		name   algo.Name
		p      algo.Params
		units  int64
		window time.Duration
	}{
		{algo.TokenBucketName, algo.Params{Limit: 60, Window: time.Minute}, 60, time.Minute},
		{algo.TokenBucketName, algo.Params{Limit: 2, Window: 2 * time.Second, Burst: 5}, 5, 5 * time.Second},
		{algo.LeakyBucketName, algo.Params{Limit: 2, Window: 2 * time.Second, Burst: 5}, 5, 5 * time.Second},
		{algo.GCRAName, algo.Params{Limit: 100, Window: time.Second, Burst: 1}, 1, 10 * time.Millisecond},
		{algo.FixedWindowName, algo.Params{Limit: 10, Window: time.Minute}, 10, time.Minute},
		{algo.SlidingLogName, algo.Params{Limit: 10, Window: time.Minute}, 10, time.Minute},
		{algo.SlidingCounterName, algo.Params{Limit: 10, Window: time.Minute}, 10, time.Minute},
	} {
		a := algo.MustNew(c.name, c.p)
		units, window := algo.Quota(a)
		if units != c.units || window != c.window {
			t.Errorf("%s %+v: Quota = %d per %v, want %d per %v", c.name, c.p, units, window, c.units, c.window)
		}
		var state []byte
		now := t0
		for i := range 3 * int(units) {
			next, d := a.Step(state, now, 1)
			if next != nil {
				state = next
			}
			r := algo.QuotaReset(d, window)
			if d.Allowed && r > window || !d.Allowed && r != d.RetryAfter {
				t.Errorf("%s step %d: QuotaReset = %v for %+v under a window of %v", c.name, i, r, d, window)
			}
			now += int64(window) / int64(2*units)
		}
	}
}
