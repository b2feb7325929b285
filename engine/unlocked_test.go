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
	"github.com/sluice-go/sluice/backend/table"
	"github.com/sluice-go/sluice/engine"
)

// TestUnlockedReadsUnderChurn: over the memory store, workers spend on a
// few keys with Apply and ApplyAll (under the stripe locks), on a frozen
// clock, so that each key is soon spent and its denials are decided from a
// read without the lock (table.ReadUnlocked, where the build has it: make
// test runs this test without the race detector too), while another
// goroutine churns the same stripes: new keys (the index grows, the arena
// is reallocated and compacted), Reset of them, Peek, ApplyAll over a
// spent key and a new one, and sweeps. Every allowed decision is spent
// exactly once: per key, the allowed decisions that included it equal
// what its record says was spent, and never exceed the capacity; and once
// a key is spent, no read without the lock lets a call through.
func TestUnlockedReadsUnderChurn(t *testing.T) {
	ctx := context.Background()
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

// TestDenialsReadWithoutLock: once a key is spent, its denials are decided
// from a read without the shard's lock where the build has it (amd64
// without the race detector), answer as a locked decision does, and a
// decision that spends again (the window passed) takes the lock and
// leaves the hint.
func TestDenialsReadWithoutLock(t *testing.T) {
	ctx := context.Background()
	for _, name := range []algo.Name{algo.GCRAName, algo.TokenBucketName, algo.LeakyBucketName, algo.FixedWindowName, algo.SlidingCounterName} {
		t.Run(string(name), func(t *testing.T) {
			clock := engine.NewFakeClock(time.Unix(1_700_000_000, 0))
			e, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			l := engine.Limit{Namespace: "n", Algorithm: algo.MustNew(name, algo.Params{Limit: 3, Window: time.Minute})}
			for range 3 {
				if d, err := e.Apply(ctx, l, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("spending the capacity: %+v, %v", d, err)
				}
			}
			first, err := e.Apply(ctx, l, "k", 1)
			if err != nil || first.Allowed {
				t.Fatalf("a call past the capacity: %+v, %v", first, err)
			}
			now := clock.Now()
			if got := engine.DeniedWithoutLock(e, l, "k", now); got != table.UnlockedReads {
				t.Fatalf("denials read without the lock: %v, want %v (table.UnlockedReads)", got, table.UnlockedReads)
			}
			for range 3 {
				d, err := e.Apply(ctx, l, "k", 1)
				if err != nil || d != first {
					t.Fatalf("a denial read without the lock: %+v, %v; the first, under it: %+v", d, err, first)
				}
			}
			if d, err := e.Apply(ctx, l, "k", 4); err == nil {
				t.Fatalf("a cost above the capacity was decided: %+v", d)
			}
			clock.Advance(2 * time.Minute)
			if d, err := e.Apply(ctx, l, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("after the window: %+v, %v", d, err)
			}
			if engine.DeniedWithoutLock(e, l, "k", clock.Now()) {
				t.Error("the hint still expects denials after a decision spent")
			}
		})
	}
}
