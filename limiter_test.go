package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
)

// newTestLimiter returns a limiter on a fake clock at t0, closed at the
// end of the test.
func newTestLimiter(t testing.TB, limit int64, window time.Duration, opts ...sluice.Option) (*sluice.Limiter, *engine.FakeClock) {
	t.Helper()
	clock := engine.NewFakeClock(t0)
	l, err := sluice.NewLimiter(limit, window, append([]sluice.Option{sluice.WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clock
}

func TestNewLimiterErrors(t *testing.T) {
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	for _, c := range []struct {
		name   string
		limit  int64
		window time.Duration
		opts   []sluice.Option
		field  string
		cause  error // also matched, where not nil
	}{
		{"zero limit", 0, time.Second, nil, "limit", algo.ErrInvalidParams},
		{"negative limit", -1, time.Second, nil, "limit", algo.ErrInvalidParams},
		{"limit too large", algo.MaxLimit + 1, time.Second, nil, "limit", algo.ErrInvalidParams},
		{"zero window", 5, 0, nil, "window", algo.ErrInvalidParams},
		{"negative window", 5, -time.Second, nil, "window", algo.ErrInvalidParams},
		{"unknown algorithm", 5, time.Second, []sluice.Option{sluice.WithAlgorithm("token-bucket")}, "algorithm", algo.ErrUnknownAlgorithm},
		{"burst on a window", 5, time.Second, []sluice.Option{sluice.WithAlgorithm(algo.FixedWindowName), sluice.WithBurst(10)}, "burst", algo.ErrInvalidParams},
		{"negative burst", 5, time.Second, []sluice.Option{sluice.WithBurst(-1)}, "burst", algo.ErrInvalidParams},
		{"store and engine", 5, time.Second, []sluice.Option{sluice.WithEngine(eng), sluice.WithStore(memory.New(nil))}, "store", nil},
		{"clock and engine", 5, time.Second, []sluice.Option{sluice.WithEngine(eng), sluice.WithClock(engine.NewFakeClock(t0))}, "clock", nil},
		{"concurrency", 5, time.Second, []sluice.Option{sluice.WithAlgorithm(algo.ConcurrencyName)}, "algorithm", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := sluice.NewLimiter(c.limit, c.window, c.opts...)
			if err == nil {
				l.Close()
				t.Fatal("NewLimiter succeeded, want an error")
			}
			var le *sluice.LimiterError
			if !errors.As(err, &le) || !errors.Is(err, sluice.ErrInvalidLimiter) {
				t.Fatalf("error %v (%T) is not a *LimiterError matching ErrInvalidLimiter", err, err)
			}
			if got, want := le.Field, c.field; got != want {
				t.Errorf("Field = %q, want %q (error %v)", got, want, err)
			}
			if c.cause != nil && !errors.Is(err, c.cause) {
				t.Errorf("error %v does not match %v", err, c.cause)
			}
		})
	}
}

// The default limiter is a token bucket of limit at once, refilled at
// limit per window, walked along a fixed timeline.
func TestLimiterSteps(t *testing.T) {
	l, clock := newTestLimiter(t, 3, 3*time.Second)
	ctx := context.Background()
	for i, s := range []struct {
		advance time.Duration
		cost    int64
		allowed bool
		remain  int64
		retry   time.Duration
	}{
		{0, 1, true, 2, 0},
		{0, 1, true, 1, 0},
		{0, 1, true, 0, 0},
		{0, 1, false, 0, time.Second},
		{999 * time.Millisecond, 1, false, 0, time.Millisecond},
		{time.Millisecond, 1, true, 0, 0},
		{3 * time.Second, 2, true, 1, 0},
		{0, 2, false, 1, time.Second},
	} {
		clock.Advance(s.advance)
		d, err := l.Take(ctx, "k", s.cost)
		if err != nil {
			t.Fatalf("step %d: Take(k, %d): %v", i, s.cost, err)
		}
		if d.Allowed != s.allowed || d.Remaining != s.remain || d.RetryAfter != s.retry || d.Limit != 3 {
			t.Errorf("step %d: Take(k, %d) = allowed %v, remaining %d, retry %v, limit %d; want %v, %d, %v, 3",
				i, s.cost, d.Allowed, d.Remaining, d.RetryAfter, d.Limit, s.allowed, s.remain, s.retry)
		}
	}
	if _, err := l.Take(ctx, "k", 4); !errors.Is(err, algo.ErrCostExceedsCapacity) {
		t.Errorf("Take(k, 4) over a capacity of 3: %v, want ErrCostExceedsCapacity", err)
	}
	if _, err := l.Take(ctx, "k", 0); !errors.Is(err, algo.ErrInvalidCost) {
		t.Errorf("Take(k, 0): %v, want ErrInvalidCost", err)
	}
}

func TestLimiterAllowKeysAndReset(t *testing.T) {
	l, _ := newTestLimiter(t, 2, time.Minute)
	for i, s := range []struct {
		key  string
		want bool
	}{{"a", true}, {"a", true}, {"a", false}, {"b", true}, {"b", true}, {"b", false}} {
		if got := l.Allow(s.key); got != s.want {
			t.Errorf("step %d: Allow(%s) = %v, want %v", i, s.key, got, s.want)
		}
	}
	if err := l.Reset(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if !l.Allow("a") {
		t.Error("Allow(a) after Reset(a) = false, want true")
	}
	if l.Allow("b") {
		t.Error("Allow(b) after Reset(a) = true: Reset reached another key")
	}
}

func TestLimiterOptions(t *testing.T) {
	t.Run("algorithm and burst", func(t *testing.T) {
		l, clock := newTestLimiter(t, 1, time.Second, sluice.WithAlgorithm(algo.GCRAName), sluice.WithBurst(3))
		if got := l.Rule().Rule().Algorithm; got != algo.GCRAName {
			t.Errorf("algorithm %q, want gcra", got)
		}
		for i := range 3 {
			if !l.Allow("k") {
				t.Fatalf("request %d of a burst of 3 denied", i+1)
			}
		}
		if l.Allow("k") {
			t.Fatal("a 4th request passed a burst of 3")
		}
		clock.Advance(time.Second)
		if !l.Allow("k") {
			t.Fatal("denied a second after, at 1 per second")
		}
	})
	t.Run("names share an engine apart", func(t *testing.T) {
		eng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(t0)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		a, errA := sluice.NewLimiter(1, time.Minute, sluice.WithEngine(eng), sluice.WithName("a"))
		a2, errA2 := sluice.NewLimiter(1, time.Minute, sluice.WithEngine(eng), sluice.WithName("a"))
		b, errB := sluice.NewLimiter(1, time.Minute, sluice.WithEngine(eng), sluice.WithName("b"))
		if err := errors.Join(errA, errA2, errB); err != nil {
			t.Fatal(err)
		}
		if !a.Allow("k") || a2.Allow("k") || !b.Allow("k") {
			t.Error("limiters of one name must share a key's budget, of two names not")
		}
		if got, want := a.Rule().Policy(), `"a";q=1;w=60`; got != want {
			t.Errorf("Policy() = %s, want %s", got, want)
		}
		// The engine is the caller's: closing a limiter leaves it open.
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Take(context.Background(), "other", 1); err != nil {
			t.Errorf("Take after another limiter's Close: %v, want the shared engine open", err)
		}
	})
	t.Run("default name", func(t *testing.T) {
		l, _ := newTestLimiter(t, 1, time.Minute, sluice.WithName(""))
		if got := l.Rule().Name(); got != sluice.DefaultLimiterName {
			t.Errorf("name %q, want %q", got, sluice.DefaultLimiterName)
		}
	})
}

// The same limiter over Pebble by one option: what a key spent survives
// Close and a reopen of the store.
func TestLimiterWithStore(t *testing.T) {
	dir := t.TempDir()
	open := func() *sluice.Limiter {
		t.Helper()
		store, err := pebble.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := sluice.NewLimiter(2, time.Hour, sluice.WithStore(store))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := open()
	if !l.Allow("k") || !l.Allow("k") || l.Allow("k") {
		t.Fatal("want two requests of k to pass and the third denied")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l.Allow("other") {
		t.Error("Allow after Close = true, want false (fail closed)")
	}
	if _, err := l.Take(context.Background(), "other", 1); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Take after Close: %v, want ErrClosed", err)
	}
	l = open()
	defer l.Close()
	if l.Allow("k") {
		t.Error("k passed after a reopen: the store forgot what it spent")
	}
	if !l.Allow("fresh") {
		t.Error("a fresh key denied after a reopen")
	}
}

// fakeSleep makes Wait's sleeps move clock instead, recording them.
type fakeSleep struct {
	clock  *engine.FakeClock
	slept  []time.Duration
	hang   bool          // never fire: the sleep is ended by ctx alone
	during func()        // called inside each sleep, after the clock moved
	fired  chan struct{} // closed when a hanging sleep starts
}

func (f *fakeSleep) after(d time.Duration) (<-chan time.Time, func() bool) {
	f.slept = append(f.slept, d)
	c := make(chan time.Time, 1)
	if f.hang {
		close(f.fired)
		return c, func() bool { return true }
	}
	f.clock.Advance(d)
	if f.during != nil {
		f.during()
	}
	c <- time.Unix(0, f.clock.Now())
	return c, func() bool { return false }
}

func TestLimiterWait(t *testing.T) {
	ctx := context.Background()
	t.Run("sleeps RetryAfter", func(t *testing.T) {
		l, clock := newTestLimiter(t, 2, 2*time.Second)
		s := &fakeSleep{clock: clock}
		sluice.SetWaitSleep(l, s.after)
		for range 2 {
			if err := l.Wait(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		if len(s.slept) != 0 {
			t.Fatalf("slept %v for requests within the budget", s.slept)
		}
		if err := l.Wait(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprint(s.slept), "[1s]"; got != want {
			t.Errorf("slept %s, want %s", got, want)
		}
	})
	t.Run("retries when another caller took the budget", func(t *testing.T) {
		l, clock := newTestLimiter(t, 1, time.Second)
		s := &fakeSleep{clock: clock}
		sluice.SetWaitSleep(l, s.after)
		l.Allow("k")
		stolen := false
		s.during = func() {
			if !stolen {
				stolen = l.Allow("k")
			}
		}
		if err := l.Wait(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprint(s.slept), "[1s 1s]"; !stolen || got != want {
			t.Errorf("stolen %v, slept %s; want true, %s", stolen, got, want)
		}
	})
	t.Run("deadline too near", func(t *testing.T) {
		l, clock := newTestLimiter(t, 1, time.Hour)
		s := &fakeSleep{clock: clock}
		sluice.SetWaitSleep(l, s.after)
		l.Allow("k")
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err := l.Wait(dctx, "k")
		if !errors.Is(err, sluice.ErrWaitExceedsDeadline) {
			t.Errorf("Wait with an hour to go and a minute's deadline: %v, want ErrWaitExceedsDeadline", err)
		}
		if len(s.slept) != 0 {
			t.Errorf("slept %v before giving up", s.slept)
		}
	})
	t.Run("deadline far enough", func(t *testing.T) {
		l, clock := newTestLimiter(t, 1, time.Minute)
		s := &fakeSleep{clock: clock}
		sluice.SetWaitSleep(l, s.after)
		l.Allow("k")
		dctx, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		if err := l.Wait(dctx, "k"); err != nil {
			t.Errorf("Wait with a minute to go and an hour's deadline: %v", err)
		}
	})
	t.Run("cancelled while sleeping", func(t *testing.T) {
		l, clock := newTestLimiter(t, 1, time.Minute)
		s := &fakeSleep{clock: clock, hang: true, fired: make(chan struct{})}
		sluice.SetWaitSleep(l, s.after)
		l.Allow("k")
		cctx, cancel := context.WithCancel(ctx)
		go func() { <-s.fired; cancel() }()
		if err := l.Wait(cctx, "k"); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait cancelled while sleeping: %v, want context.Canceled", err)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		l, _ := newTestLimiter(t, 1, time.Minute)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := l.Wait(cctx, "k"); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait on a cancelled context: %v, want context.Canceled", err)
		}
		if !l.Allow("k") {
			t.Error("a cancelled Wait spent the budget")
		}
	})
	t.Run("leaky bucket delay", func(t *testing.T) {
		l, clock := newTestLimiter(t, 2, time.Second, sluice.WithAlgorithm(algo.LeakyBucketName))
		s := &fakeSleep{clock: clock}
		sluice.SetWaitSleep(l, s.after)
		for range 3 {
			if err := l.Wait(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		// The first leaves at once, the second waits behind it for half a
		// second (the rate's interval), and the third, arriving as the
		// second leaves, waits behind it for another half.
		if got, want := fmt.Sprint(s.slept), "[500ms 500ms]"; got != want {
			t.Errorf("slept %s, want %s", got, want)
		}
	})
	t.Run("store error", func(t *testing.T) {
		l, _ := newTestLimiter(t, 1, time.Minute)
		l.Close()
		if err := l.Wait(ctx, "k"); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("Wait on a closed limiter: %v, want ErrClosed", err)
		}
	})
}

// Allow never admits more than the capacity (the burst, or the limit)
// plus the limit in any window-long interval, for any algorithm, burst,
// keys and steps of a fake clock; and no more than the capacity while the
// clock stands still.
func TestLimiterAllowBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.SampledFrom(algo.Names).Draw(t, "algorithm")
		limit := rapid.Int64Range(1, 10).Draw(t, "limit")
		window := time.Duration(rapid.Int64Range(1, 5_000).Draw(t, "window_ms")) * time.Millisecond
		opts := []sluice.Option{sluice.WithAlgorithm(name)}
		capacity := limit
		if name == algo.TokenBucketName || name == algo.LeakyBucketName || name == algo.GCRAName {
			if burst := rapid.Int64Range(0, 20).Draw(t, "burst"); burst > 0 {
				opts = append(opts, sluice.WithBurst(burst))
				capacity = burst
			}
		}
		if name == algo.GCRAName && int64(window) < limit {
			return
		}
		clock := engine.NewFakeClock(t0)
		l, err := sluice.NewLimiter(limit, window, append(opts, sluice.WithClock(clock))...)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		admitted := map[string][]int64{}
		keys := []string{"a", "b", "c"}
		for range rapid.IntRange(1, 300).Draw(t, "requests") {
			clock.Advance(time.Duration(rapid.Int64Range(0, int64(window)/4).Draw(t, "advance")))
			key := rapid.SampledFrom(keys).Draw(t, "key")
			if l.Allow(key) {
				admitted[key] = append(admitted[key], clock.Now())
			}
		}
		for key, times := range admitted {
			for i, start := range times {
				n, still := int64(0), int64(0)
				for _, at := range times[i:] {
					if at-start <= int64(window) {
						n++
					}
					if at == start {
						still++
					}
				}
				if n > capacity+limit {
					t.Fatalf("%s limit %d per %v, capacity %d: key %s admitted %d in the window from %d", name, limit, window, capacity, key, n, start-t0.UnixNano())
				}
				if still > capacity {
					t.Fatalf("%s capacity %d: key %s admitted %d at one instant %d", name, capacity, key, still, start-t0.UnixNano())
				}
			}
		}
	})
}

// Concurrent callers of one key on a frozen clock pass exactly the
// capacity between them.
func TestLimiterConcurrentAllow(t *testing.T) {
	l, _ := newTestLimiter(t, 100, time.Hour)
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if l.Allow("hot") {
					passed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := passed.Load(); got != 100 {
		t.Errorf("8 callers × 50 on a capacity of 100 passed %d, want 100", got)
	}
}
