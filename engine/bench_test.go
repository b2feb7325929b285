package engine_test

import (
	"strconv"
	"testing"

	"github.com/sluice-go/sluice/algo"
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

func BenchmarkApplyHotKey(b *testing.B) {
	for _, name := range []string{algo.TokenBucketName, algo.GCRAName} {
		b.Run(name, func(b *testing.B) {
			e := benchEngine(b, engine.SystemClock{})
			l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(name, unlimited)}
			b.ReportAllocs()
			for b.Loop() {
				e.Apply(l, "user-0000000000000001", 1)
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
			e.Apply(l, keys[i%len(keys)], 1)
			i += 7
		}
	})
}
