package sluice_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// benchLimit admits every call of a key in use: a billion per ten years
// never runs out in a benchmark.
const benchLimit, benchWindow = 1_000_000_000, algo.MaxWindow

// benchKeys returns n keys of the size of a user id.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(1_000_000_000_000_000+i)
	}
	return keys
}

// BenchmarkLimiter is a Limiter's allowed path beside the engine's Apply
// it is made of, on one hot key and on 10,000 keys: what the one-import
// path costs over the engine.
func BenchmarkLimiter(b *testing.B) {
	for _, keys := range []struct {
		name string
		keys []string
	}{{"HotKey", benchKeys(1)}, {"10kKeys", benchKeys(10_000)}} {
		b.Run(keys.name+"/Allow", func(b *testing.B) {
			l, err := sluice.NewLimiter(benchLimit, benchWindow)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			ks := keys.keys
			for _, k := range ks {
				l.Allow(k) // every key in use: the steady path, not its first visit
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.Allow(ks[i%len(ks)])
				i += 7
			}
		})
		b.Run(keys.name+"/Take", func(b *testing.B) {
			l, err := sluice.NewLimiter(benchLimit, benchWindow)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			ctx := context.Background()
			ks := keys.keys
			for _, k := range ks {
				l.Take(ctx, k, 1)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.Take(ctx, ks[i%len(ks)], 1)
				i += 7
			}
		})
		b.Run(keys.name+"/EngineApply", func(b *testing.B) {
			e, err := engine.New(memory.New(nil), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { e.Close() })
			lim := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: benchLimit, Window: benchWindow})}
			ctx := context.Background()
			ks := keys.keys
			for _, k := range ks {
				e.Apply(ctx, lim, k, 1)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				e.Apply(ctx, lim, ks[i%len(ks)], 1)
				i += 7
			}
		})
	}
}

// BenchmarkLimiterParallel10k is Allow from every core over 10,000 keys.
func BenchmarkLimiterParallel10k(b *testing.B) {
	l, err := sluice.NewLimiter(benchLimit, benchWindow)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	keys := benchKeys(10_000)
	for _, k := range keys {
		l.Allow(k)
	}
	b.ResetTimer()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Allow(keys[i%len(keys)])
			i += 7
		}
	})
}

// Allow and Take cost no allocation on the allowed path of a key in use,
// nor on the denied one, over the memory store.
func TestLimiterDoesNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("SKIPPED: coverage counters allocate")
	}
	for _, name := range algo.Names {
		if name == algo.SlidingLogName {
			continue // its record grows with the requests in its window
		}
		t.Run(string(name), func(t *testing.T) {
			l, clock := newTestLimiter(t, 2, time.Second, sluice.WithAlgorithm(name))
			ctx := context.Background()
			for _, key := range []string{"allowed", "denied"} {
				l.Allow(key)
				l.Allow(key) // a limit of 2: the key is spent
				want := key == "allowed"
				wrong := 0
				allocs := testing.AllocsPerRun(100, func() {
					if want {
						clock.Advance(2 * time.Second) // the budget is whole again
					}
					d, err := l.Take(ctx, key, 1)
					if err != nil || d.Allowed != want || l.Allow(key) != want {
						wrong++
					}
				})
				if wrong > 0 {
					t.Errorf("%s: %d of 100 runs decided otherwise than expected", key, wrong)
				}
				if allocs != 0 {
					t.Errorf("%s: %.1f allocations a Take and Allow, want 0", key, allocs)
				}
			}
		})
	}
}
