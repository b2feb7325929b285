package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// BenchmarkAcquireRelease is the cost of a slot of a concurrency limit
// taken and given back, on one key of the memory store, against a plain
// decision on the same key: with no other slot held (the record grows from
// empty to one lease and back), and with three of four held by others.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: 4, Window: time.Minute})}
	const key = "user-0000000000000001"
	b.Run("apply-gcra", func(b *testing.B) {
		e := benchEngine(b, engine.SystemClock{})
		g := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(algo.GCRAName, unlimited)}
		b.ReportAllocs()
		for b.Loop() {
			e.Apply(ctx, g, key, 1)
		}
	})
	for _, held := range []int{0, 3} {
		b.Run("acquire-into+release/held="+string(rune('0'+held)), func(b *testing.B) {
			e := benchEngine(b, engine.SystemClock{})
			for range held {
				if _, err := e.Acquire(ctx, l, key); err != nil {
					b.Fatal(err)
				}
			}
			var ls engine.Lease
			b.ReportAllocs()
			for b.Loop() {
				if err := e.AcquireInto(ctx, l, key, &ls); err != nil || !ls.Decision.Allowed {
					b.Fatalf("%+v, %v", ls.Decision, err)
				}
				if _, err := ls.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
