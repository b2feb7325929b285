package engine_test

import (
	"context"
	"testing"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/engine"
)

// BenchmarkReserveSettle is the cost of a reservation and its settle
// against a plain decision, on one hot key of the memory store: Apply, a
// Reserve settled at its estimate (no store call), below it (a refund) and
// above it (a charge). Over the in-process Swapper it reports the
// compare-and-swaps per operation, the round trips a Redis store would
// make one caller at a time.
func BenchmarkReserveSettle(b *testing.B) {
	ctx := context.Background()
	for _, name := range []algo.Name{algo.TokenBucketName, algo.GCRAName, algo.FixedWindowName, algo.SlidingCounterName} {
		l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(name, unlimited)}
		const key = "user-0000000000000001"
		b.Run(string(name)+"/apply", func(b *testing.B) {
			e := benchEngine(b, engine.SystemClock{})
			b.ReportAllocs()
			for b.Loop() {
				e.Apply(ctx, l, key, 10)
			}
		})
		for _, c := range []struct {
			name   string
			actual int64
		}{{"settle-equal", 10}, {"settle-refund", 4}, {"settle-charge", 12}} {
			b.Run(string(name)+"/reserve-into+"+c.name, func(b *testing.B) {
				e := benchEngine(b, engine.SystemClock{})
				var r engine.Reservation
				b.ReportAllocs()
				for b.Loop() {
					if err := e.ReserveInto(ctx, l, key, 10, &r); err != nil {
						b.Fatal(err)
					}
					if _, err := r.Settle(ctx, c.actual); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(string(name)+"/reserve+"+c.name, func(b *testing.B) {
				e := benchEngine(b, engine.SystemClock{})
				b.ReportAllocs()
				for b.Loop() {
					r, err := e.Reserve(ctx, l, key, 10)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := r.Settle(ctx, c.actual); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(algo.TokenBucketName, unlimited)}
	for _, c := range []struct {
		name   string
		actual int64 // 0: Apply alone
	}{{"apply", 0}, {"reserve+settle-refund", 4}} {
		b.Run("swap/"+c.name, func(b *testing.B) {
			s := backendtest.NewSwapStore(nil)
			e, err := engine.New(s, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { e.Close() })
			b.ReportAllocs()
			for b.Loop() {
				if c.actual == 0 {
					e.Apply(ctx, l, "k", 10)
					continue
				}
				r, _ := e.Reserve(ctx, l, "k", 10)
				r.Settle(ctx, c.actual)
			}
			b.ReportMetric(float64(e.Stats().Swaps)/float64(b.N), "swaps/op")
		})
	}
}
