package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
)

// BenchmarkApplyManyKeys is one caller deciding on 10,000 keys in turn, each
// already known to the engine's last-seen records: one compare-and-swap per
// decision. Its allocations per op are the swap path's and go-redis' per
// decision.
func BenchmarkApplyManyKeys(b *testing.B) {
	srv := redistest.Start(b)
	s := open(b, []string{srv.Addr}, redis.Options{Timeout: time.Second})
	e := newEngine(b, s, engine.Options{})
	l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(algo.GCRAName, algo.Params{Limit: 1_000_000_000, Window: time.Hour})}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
		if _, err := e.Apply(context.Background(), l, keys[i], 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if d, err := e.Apply(context.Background(), l, keys[i%len(keys)], 1); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkReserveSettle is one caller's Apply against its Reserve and
// Settle (below the estimate: a refund, whose swap also announces the
// key) on one key of a real Redis, one after the other, and the same
// from 16 callers on one hot key, whose settles ride the swaps queued on
// the key. swaps/op counts the compare-and-swaps sent per operation: the
// round trips, as the engine sends at most one per key at a time.
func BenchmarkReserveSettle(b *testing.B) {
	srv := redistest.Start(b)
	l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 1_000_000_000, Window: time.Hour})}
	ctx := context.Background()
	op := func(e *engine.Engine, reserve bool) {
		if !reserve {
			if d, err := e.Apply(ctx, l, "k", 10); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
			return
		}
		r, err := e.Reserve(ctx, l, "k", 10)
		if err != nil || !r.Decision.Allowed {
			b.Fatal(r, err)
		}
		if _, err := r.Settle(ctx, 4); err != nil {
			b.Fatal(err)
		}
	}
	for _, parallel := range []bool{false, true} {
		for _, reserve := range []bool{false, true} {
			name := "apply"
			if reserve {
				name = "reserve+settle"
			}
			if parallel {
				name = "hot-key-16/" + name
			}
			b.Run(name, func(b *testing.B) {
				e := newEngine(b, open(b, []string{srv.Addr}, redis.Options{Timeout: time.Second}), engine.Options{})
				op(e, reserve) // learn the store's clock and the record
				swaps := e.Stats().Swaps
				b.ReportAllocs()
				b.ResetTimer()
				if parallel {
					b.SetParallelism(8) // 16 callers on 2 cores
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							op(e, reserve)
						}
					})
				} else {
					for range b.N {
						op(e, reserve)
					}
				}
				b.ReportMetric(float64(e.Stats().Swaps-swaps)/float64(b.N), "swaps/op")
			})
		}
	}
}
