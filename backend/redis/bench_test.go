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
