package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// TestEntryLocksUnderChurn: over the memory store, workers spend on a few
// keys with Apply (decided under the key's entry lock, or the stripe's
// when the entry is busy) and ApplyAll (under the stripe locks), on a
// frozen clock, while another goroutine churns the same stripes: new keys
// (the index grows, the arena is reallocated and compacted), Reset of them,
// Peek, ApplyAll over a spent key and a new one, and sweeps. Every allowed
// decision is spent exactly once: per key, the allowed decisions that
// included it equal what its record says was spent, and never exceed the
// capacity. Run it under -race.
func TestEntryLocksUnderChurn(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.SampledFrom(algo.Names).Draw(t, "algorithm")
		capacity := rapid.Int64Range(1, 60).Draw(t, "capacity")
		shards := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "shards")
		keys := rapid.IntRange(1, 6).Draw(t, "keys")
		workers := rapid.IntRange(2, 4).Draw(t, "workers")
		calls := rapid.IntRange(10, 120).Draw(t, "calls")
		churn := rapid.IntRange(50, 600).Draw(t, "churn")

		clock := engine.NewFakeClock(time.Unix(1_700_000_000, 0))
		e, err := engine.New(memory.New(&memory.Options{Shards: shards, SweepInterval: -1}), &engine.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		l := engine.Limit{Namespace: "n", Algorithm: algo.MustNew(name, algo.Params{Limit: capacity, Window: time.Hour})}
		key := func(k int) string { return fmt.Sprintf("caller-%d", k) }
		ctx := context.Background()

		allowed := make([]atomic.Int64, keys)
		errs := make(chan error, workers+1)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range calls {
					k := (w + i) % keys
					if i%5 == 4 && keys > 1 {
						// Two keys, all or nothing, under their stripe locks.
						j := (k + 1) % keys
						_, ok, err := e.ApplyAll(ctx, []engine.Request{{Limit: l, Key: key(k), Cost: 1}, {Limit: l, Key: key(j), Cost: 1}})
						if err != nil {
							errs <- err
							return
						}
						if ok {
							allowed[k].Add(1)
							allowed[j].Add(1)
						}
						continue
					}
					d, err := e.Apply(ctx, l, key(k), 1)
					if err != nil {
						errs <- err
						return
					}
					if d.Allowed {
						allowed[k].Add(1)
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range churn {
				c := fmt.Sprintf("churn-%d", i)
				var err error
				switch i % 6 {
				case 0, 1, 2:
					_, err = e.Apply(ctx, l, c, 1)
				case 3:
					err = e.Reset(ctx, l, fmt.Sprintf("churn-%d", i/2))
				case 4:
					_, err = e.Peek(ctx, l, key(i%keys), 1)
				case 5:
					_, _, err = e.ApplyAll(ctx, []engine.Request{{Limit: l, Key: c, Cost: 1}, {Limit: l, Key: fmt.Sprintf("churn-%d", i-1), Cost: 1}})
					if err == nil {
						_, err = e.Sweep(0)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for k := range keys {
			d, err := e.Peek(ctx, l, key(k), 1)
			if err != nil {
				t.Fatal(err)
			}
			// An allowed Peek answers what would remain after it; a denied
			// one, what remains.
			spent := capacity - d.Remaining
			if d.Allowed {
				spent--
			}
			if got := allowed[k].Load(); got != spent || got > capacity {
				t.Errorf("%s: %d decisions allowed, the record says %d of %d spent", key(k), got, spent, capacity)
			}
		}
	})
}
