package engine_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

func benchEngine(b testing.TB, clock engine.Clock) *engine.Engine {
	e, err := engine.New(memory.New(nil), &engine.Options{Clock: clock})
	if err != nil {
		panic(err)
	}
	if b != nil {
		b.Cleanup(func() { e.Close() })
	}
	return e
}

// unlimited admits every call without the record ever running out or
// expiring between calls: a billion per ten years, the steady path of a key
// in use.
var unlimited = algo.Params{Limit: 1_000_000_000, Window: algo.MaxWindow}

// BenchmarkApplyHotKey is the allowed path of a key in use, for every
// algorithm but the sliding log, whose record under a real clock grows with
// the requests in its window (see TestApplyDoesNotAllocate for its steady
// path).
func BenchmarkApplyHotKey(b *testing.B) {
	for _, name := range algo.Names {
		if name == algo.SlidingLogName {
			continue
		}
		b.Run(string(name), func(b *testing.B) {
			e := benchEngine(b, engine.SystemClock{})
			l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(name, unlimited)}
			b.ReportAllocs()
			for b.Loop() {
				e.Apply(context.Background(), l, "user-0000000000000001", 1)
			}
		})
	}
}

func BenchmarkApplyParallel10k(b *testing.B) {
	e := benchEngine(b, engine.SystemClock{})
	l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(algo.TokenBucketName, unlimited)}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(1_000_000_000_000_000+i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			e.Apply(context.Background(), l, keys[i%len(keys)], 1)
			i += 7
		}
	})
}

// exhausted allows one request an hour: after the first, every request is
// denied.
var exhausted = algo.Params{Limit: 1, Window: time.Hour}

func BenchmarkApplyHotKeyDenied(b *testing.B) {
	for _, name := range algo.Names {
		b.Run(string(name), func(b *testing.B) {
			e := benchEngine(b, engine.SystemClock{})
			l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(name, exhausted)}
			e.Apply(context.Background(), l, "user-0000000000000001", 1)
			b.ReportAllocs()
			for b.Loop() {
				e.Apply(context.Background(), l, "user-0000000000000001", 1)
			}
		})
	}
}

// TestApplyDoesNotAllocate checks that a decision over the memory backend
// allocates nothing, for every algorithm, on the allowed path of a key in
// use and on the denied path. (A key's first request may allocate: its
// record is added to the store.) The clock moves 125µs a request, so that
// at 16 a millisecond every request is allowed and a sliding log holds a
// steady 8 entries.
func TestApplyDoesNotAllocate(t *testing.T) {
	for _, name := range algo.Names {
		for _, c := range []struct {
			what    string
			p       algo.Params
			allowed bool
		}{{"allowed", algo.Params{Limit: 16, Window: time.Millisecond}, true}, {"denied", exhausted, false}} {
			clock := engine.NewFakeClock(time.Unix(1_700_000_000, 0))
			e := benchEngine(t, clock)
			l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(name, c.p)}
			for range 32 { // past the first request, and a log at its steady size
				clock.Advance(125 * time.Microsecond)
				e.Apply(context.Background(), l, "user-0000000000000001", 1)
			}
			var d algo.Decision
			var err error
			wrong := 0
			allocs := testing.AllocsPerRun(200, func() {
				clock.Advance(125 * time.Microsecond)
				d, err = e.Apply(context.Background(), l, "user-0000000000000001", 1)
				if err != nil || d.Allowed != c.allowed {
					wrong++
				}
			})
			if wrong > 0 {
				t.Fatalf("%s %s: %d requests answered %+v, %v; want allowed %v", name, c.what, wrong, d, err, c.allowed)
			}
			if allocs != 0 {
				t.Errorf("%s %s: %.1f allocations per Apply, want 0", name, c.what, allocs)
			}
		}
	}
}

// BenchmarkApplySwap is the compare-and-swap path over the in-process
// Swapper, 16 callers on one key or on 10,000 keys: with no delay it
// measures the engine's own cost on that path; with a 100µs delay per
// compare-and-swap, standing for a round trip, swaps/op shows the callers
// of one key sharing commits.
func BenchmarkApplySwap(b *testing.B) {
	for _, c := range []struct {
		keys  int
		delay time.Duration
	}{{1, 0}, {10_000, 0}, {1, 100 * time.Microsecond}, {10_000, 100 * time.Microsecond}} {
		b.Run(fmt.Sprintf("%d-keys/delay-%v", c.keys, c.delay), func(b *testing.B) {
			keys := c.keys
			e, err := engine.New(backendtest.NewSwapStore(&backendtest.SwapOptions{Delay: c.delay}), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { e.Close() })
			l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(algo.TokenBucketName, unlimited)}
			names := make([]string, keys)
			for i := range names {
				names[i] = "user-" + strconv.Itoa(1_000_000_000_000_000+i)
			}
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := e.Apply(context.Background(), l, names[i%len(names)], 1); err != nil {
						b.Error(err)
						return
					}
					i += 7
				}
			})
			s := e.Stats()
			b.ReportMetric(float64(s.Swaps)/float64(b.N), "swaps/op")
		})
	}
}

// BenchmarkApplyAllSwap is ApplyAll of a user's limit and a shared
// tenant's (the rls door's tenant+user request) over the in-process
// Swapper, 16 callers over 10,000 users: with no delay the engine's own
// cost; with a 100µs delay per compare-and-swap, standing for a round
// trip, swaps/op shows the calls queued on the tenant's key committed
// together.
func BenchmarkApplyAllSwap(b *testing.B) {
	for _, delay := range []time.Duration{0, 100 * time.Microsecond} {
		b.Run(fmt.Sprintf("delay-%v", delay), func(b *testing.B) {
			e, err := engine.New(backendtest.NewSwapStore(&backendtest.SwapOptions{Delay: delay}), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { e.Close() })
			tenant := engine.Limit{Namespace: "tenant", Algorithm: algo.MustNew(algo.TokenBucketName, unlimited)}
			user := engine.Limit{Namespace: "user", Algorithm: algo.MustNew(algo.TokenBucketName, unlimited)}
			names := make([]string, 10_000)
			for i := range names {
				names[i] = "user-" + strconv.Itoa(1_000_000_000_000_000+i)
			}
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				reqs := []engine.Request{{Limit: tenant, Key: "t-1", Cost: 1}, {Limit: user, Cost: 1}}
				for pb.Next() {
					reqs[1].Key = names[i%len(names)]
					if _, _, err := e.ApplyAll(context.Background(), reqs); err != nil {
						b.Error(err)
						return
					}
					i += 7
				}
			})
			s := e.Stats()
			b.ReportMetric(float64(s.Swaps)/float64(b.N), "swaps/op")
		})
	}
}

// BenchmarkApplyStill decides one hot key, and 100,000 keys in turn, from
// one goroutine, allowed and denied, by Apply and by ApplyKeyInto with the
// keys prepared, on a clock that stands still: a decision with no clock read in
// it, hot in the cache or not. Under valgrind it counts the same
// instructions and misses per decision at any speed: no record ages out
// between its calls, and no sweeper runs beside them.
func BenchmarkApplyStill(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "user-" + strconv.Itoa(1_000_000_000_000_000+i)
		}
		for _, tc := range []struct {
			name    string
			params  algo.Params
			allowed bool
		}{{"allowed", unlimited, true}, {"denied", exhausted, false}} {
			for _, name := range []algo.Name{algo.GCRAName, algo.TokenBucketName} {
				for _, prepared := range []bool{false, true} {
					label := fmt.Sprintf("keys=%d/%s/%s", n, tc.name, name)
					if prepared {
						label += "+key"
					}
					b.Run(label, func(b *testing.B) { benchStill(b, keys, tc.params, name, prepared, tc.allowed) })
				}
			}
		}
	}
}

func benchStill(b *testing.B, keys []string, params algo.Params, name algo.Name, prepared, allowed bool) {
	clock := engine.NewCoarseClock(time.Hour)
	clock.Close() // stands still at its first tick
	// No sweeper either: nothing runs beside the decisions.
	e, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(name, params)}
	ks := make([]engine.Key, len(keys))
	for i, k := range keys {
		ks[i] = l.Key(k)
		var d algo.Decision
		if err := e.ApplyKeyInto(context.Background(), l, &ks[i], 1, &d); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i, wrong := 0, 0
	for b.Loop() {
		var d algo.Decision
		if prepared {
			e.ApplyKeyInto(context.Background(), l, &ks[i], 1, &d)
		} else {
			d, _ = e.Apply(context.Background(), l, keys[i], 1)
		}
		if d.Allowed != allowed {
			wrong++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	if wrong > 0 {
		b.Fatalf("%d decisions answered allowed=%v", wrong, !allowed)
	}
}
