package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// TestReserveAll reserves two limits at once, on the memory store and
// over a Swapper: all or nothing, each reservation settling its own limit,
// a denied batch leaving nothing to settle.
func TestReserveAll(t *testing.T) {
	clock := engine.NewFakeClock(time.Unix(1_700_000_040, 0))
	for _, tc := range []struct {
		name string
		open func() (*engine.Engine, error)
	}{
		{"memory", func() (*engine.Engine, error) {
			return engine.New(memory.New(nil), &engine.Options{Clock: clock})
		}},
		{"swapper", func() (*engine.Engine, error) {
			return engine.New(backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now}), &engine.Options{Clock: clock})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := tc.open()
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			tokens := engine.Limit{Namespace: "tokens", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 100, Window: time.Minute})}
			requests := engine.Limit{Namespace: "requests", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 3, Window: time.Minute})}
			remaining := func(l engine.Limit) int64 {
				d, err := e.Peek(ctx, l, "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				return d.Remaining + 1
			}
			reqs := []engine.Request{{Limit: tokens, Key: "k", Cost: 60}, {Limit: requests, Key: "k", Cost: 1}}
			rs := make([]engine.Reservation, 2)
			all, err := e.ReserveAll(ctx, reqs, rs)
			if err != nil || !all {
				t.Fatalf("ReserveAll = %v, %v; want all allowed", all, err)
			}
			if s, err := rs[0].Settle(ctx, 20); err != nil || s.Refunded != 40 {
				t.Fatalf("settle tokens: %+v, %v; want 40 refunded", s, err)
			}
			if _, err := rs[1].Settle(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := rs[0].Settle(ctx, 20); !errors.Is(err, engine.ErrSettled) {
				t.Fatalf("second settle: %v, want ErrSettled", err)
			}
			if got := remaining(tokens); got != 80 {
				t.Fatalf("tokens remaining %d, want 80", got)
			}
			// A batch the tokens limit denies spends nothing on either,
			// and leaves nothing to settle.
			reqs[0].Cost = 90
			all, err = e.ReserveAll(ctx, reqs, rs)
			if err != nil || all {
				t.Fatalf("ReserveAll = %v, %v; want denied", all, err)
			}
			for i := range rs {
				if _, err := rs[i].Settle(ctx, 0); err == nil {
					t.Fatalf("reservation %d of a denied batch settled", i)
				}
			}
			if got, want := remaining(tokens), int64(80); got != want {
				t.Fatalf("tokens remaining %d, want %d", got, want)
			}
			if got, want := remaining(requests), int64(2); got != want {
				t.Fatalf("requests remaining %d, want %d", got, want)
			}
			// A batch of one is ReserveInto.
			one := make([]engine.Reservation, 1)
			if all, err := e.ReserveAll(ctx, reqs[:1:1], one); err != nil || all {
				t.Fatalf("ReserveAll of one = %v, %v; want denied (90 > 80)", all, err)
			}
			if _, err := one[0].Settle(ctx, 0); !errors.Is(err, engine.ErrNotReserved) {
				t.Fatalf("settle of a denied single reservation: %v, want ErrNotReserved", err)
			}
		})
	}
}
