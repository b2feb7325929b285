package engine_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// BenchmarkApplyAllKeys is one ApplyAll of n requests on n distinct keys,
// from one goroutine, on the memory store and over the in-process Swapper:
// a door's few (3), and many (10,000), whose cost must grow with n, not
// n².
func BenchmarkApplyAllKeys(b *testing.B) {
	for _, store := range []string{"memory", "swap"} {
		for _, n := range []int{3, 10_000} {
			b.Run(store+"/"+strconv.Itoa(n), func(b *testing.B) {
				var e *engine.Engine
				var err error
				if store == "memory" {
					e, err = engine.New(memory.New(&memory.Options{SweepInterval: -1}), nil)
				} else {
					e, err = engine.New(backendtest.NewSwapStore(nil), nil)
				}
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { e.Close() })
				l := engine.Limit{Namespace: "user", Algorithm: algo.MustNew(algo.TokenBucketName, unlimited)}
				reqs := make([]engine.Request, n)
				for i := range reqs {
					reqs[i] = engine.Request{Limit: l, Key: "user-" + strconv.Itoa(1_000_000_000_000_000+i), Cost: 1}
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, all, err := e.ApplyAll(context.Background(), reqs); err != nil || !all {
						b.Fatal(all, err)
					}
				}
			})
		}
	}
}
