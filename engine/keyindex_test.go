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

// TestApplyAllWorkIsLinearInKeys holds ApplyAll's search for a request's
// key among the call's others to a few slots examined per request, on the
// striped path and the swap path, with every key distinct and with keys
// named twice: the work of a call of n requests grows with n, not n² (a
// request of 80,000 descriptors once took 15 s). Counted, not timed.
func TestApplyAllWorkIsLinearInKeys(t *testing.T) {
	for _, store := range []string{"memory", "swap"} {
		for _, repeat := range []int{1, 2} {
			t.Run(store+"/repeat="+strconv.Itoa(repeat), func(t *testing.T) {
				var e *engine.Engine
				var err error
				if store == "memory" {
					e, err = engine.New(memory.New(&memory.Options{SweepInterval: -1}), nil)
				} else {
					e, err = engine.New(backendtest.NewSwapStore(nil), nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Close() })
				l := engine.Limit{Namespace: "user", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 1000, Window: 1e9})}
				for _, n := range []int{100, 5000} {
					reqs := make([]engine.Request, 0, n)
					for i := range n {
						reqs = append(reqs, engine.Request{Limit: l, Key: strconv.Itoa(i / repeat), Cost: 1})
					}
					var all bool
					probes := engine.CountKeyProbes(func() {
						_, all, err = e.ApplyAll(context.Background(), reqs)
					})
					if err != nil || !all {
						t.Fatalf("n=%d: ApplyAll = %v, %v; want every request allowed", n, all, err)
					}
					// A scan of up to 16 slots for the first keys, then
					// about one slot per lookup (plus the rare hash shared).
					if limit := int64(16*16 + 2*n); probes > limit {
						t.Errorf("n=%d: %d slots examined, want at most %d (linear in n)", n, probes, limit)
					}
				}
			})
		}
	}
}

// TestApplyAllKeysNamedTwice: a key named twice in a call, past the scan's
// few, is one slot: its second request is stepped from the first's outcome
// and the call denies when together they pass the limit.
func TestApplyAllKeysNamedTwice(t *testing.T) {
	for _, store := range []string{"memory", "swap"} {
		t.Run(store, func(t *testing.T) {
			var e *engine.Engine
			var err error
			if store == "memory" {
				e, err = engine.New(memory.New(&memory.Options{SweepInterval: -1}), nil)
			} else {
				e, err = engine.New(backendtest.NewSwapStore(nil), nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			l := engine.Limit{Namespace: "user", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 1, Window: 3600e9})}
			var reqs []engine.Request
			for i := range 100 {
				reqs = append(reqs, engine.Request{Limit: l, Key: strconv.Itoa(i), Cost: 1})
			}
			reqs = append(reqs, engine.Request{Limit: l, Key: "50", Cost: 1})
			ds, all, err := e.ApplyAll(context.Background(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			if all || ds[50].Allowed != true || ds[100].Allowed {
				t.Fatalf("all=%v, key 50 first %v then %v; want the second denied and the call denied", all, ds[50].Allowed, ds[100].Allowed)
			}
			// Nothing was spent: each key alone is allowed once.
			if _, all, err := e.ApplyAll(context.Background(), reqs[:100]); err != nil || !all {
				t.Fatalf("after a denied call: %v, %v; want every key unspent", all, err)
			}
		})
	}
}
