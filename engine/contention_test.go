package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// admissionBound is the most an algorithm may admit for one key, at cost 1,
// while the clock moves by elapsed:
//   - the buckets (token, leaky, GCRA): capacity + limit·elapsed/window;
//   - the sliding log: limit in any window, so limit per started window;
//   - the fixed window: limit per aligned window the run touches, so twice
//     the limit across one boundary, as the algorithm documents;
//   - the sliding counter: its estimate counts the current window in full,
//     so the same as the fixed window.
func admissionBound(name algo.Name, p algo.Params, elapsed time.Duration) int64 {
	w, l := int64(p.Window), p.Limit
	switch name {
	case algo.TokenBucketName, algo.LeakyBucketName, algo.GCRAName:
		return p.Capacity() + l*int64(elapsed)/w
	case algo.SlidingLogName:
		return l * (int64(elapsed)/w + 1)
	default: // fixed window, sliding counter
		return l * (int64(elapsed)/w + 2)
	}
}

// TestContentionWithARealClock: 64 goroutines hammer one key, or four, for a
// short run (100ms, longer until every key has had a few times its capacity
// in calls) with the system clock, over the memory store, over the durable
// tier on Pebble flushing every few milliseconds, and over the
// compare-and-swap path on the in-process Swapper (on its own system
// clock). Per key, the admissions never exceed what the algorithm allows for the time the run
// took (timestamps taken before the first call and after the last): a lost
// update under the stripe lock would admit far more. Run it under -race.
func TestContentionWithARealClock(t *testing.T) {
	const (
		goroutines = 64
		run        = 100 * time.Millisecond
	)
	p := algo.Params{Limit: 40, Window: 50 * time.Millisecond}
	stores := []struct {
		name string
		open func(t *testing.T) backend.Backend
		opts *engine.Options
	}{
		{"memory", func(*testing.T) backend.Backend { return memory.New(nil) }, nil},
		{"pebble-interval", func(t *testing.T) backend.Backend { return openPebble(t, t.TempDir()) },
			&engine.Options{Durability: engine.Interval, FlushInterval: 5 * time.Millisecond}},
		{"swap", func(*testing.T) backend.Backend { return backendtest.NewSwapStore(nil) }, nil},
	}
	for _, st := range stores {
		for _, keys := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/%d-keys", st.name, keys), func(t *testing.T) {
				e, err := engine.New(st.open(t), st.opts)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				for _, name := range algo.Names {
					l := limit(name, p, string(name))
					admitted := make([]atomic.Int64, keys)
					perKey := make([]atomic.Int64, keys)
					var calls atomic.Int64
					var stop atomic.Bool
					var wg sync.WaitGroup
					start := engine.SystemClock{}.Now()
					for g := range goroutines {
						wg.Add(1)
						go func() {
							defer wg.Done()
							k := g % keys
							key := fmt.Sprintf("k%d", k)
							for !stop.Load() {
								d, err := e.Apply(context.Background(), l, key, 1)
								if err != nil {
									t.Error(err)
									return
								}
								calls.Add(1)
								perKey[k].Add(1)
								if d.Allowed {
									admitted[k].Add(1)
								}
							}
						}()
					}
					// Run for at least run, and until every key has had a
					// fair share of calls: with 64 goroutines on a few
					// cores some may not be scheduled at all for a while.
					for began := time.Now(); ; time.Sleep(5 * time.Millisecond) {
						if time.Since(began) > 10*time.Second {
							stop.Store(true)
							wg.Wait()
							t.Fatalf("%s: a key had fewer than %d calls in 10s", name, 4*p.Capacity())
						}
						if time.Since(began) < run {
							continue
						}
						fair := true
						for k := range perKey {
							fair = fair && perKey[k].Load() >= 4*p.Capacity()
						}
						if fair {
							break
						}
					}
					stop.Store(true)
					wg.Wait()
					elapsed := time.Duration(engine.SystemClock{}.Now() - start)
					bound := admissionBound(name, p, elapsed)
					for k := range admitted {
						n := admitted[k].Load()
						if n > bound {
							t.Errorf("%s, key %d: %d admitted in %v, more than the %d allowed (%d calls)", name, k, n, elapsed, bound, calls.Load())
						}
						if n < p.Capacity() {
							t.Errorf("%s, key %d: %d admitted in %v, less than one capacity (%d): the run tested nothing", name, k, n, elapsed, p.Capacity())
						}
					}
					if testing.Verbose() {
						t.Logf("%s: %d calls in %v; key 0 admitted %d of at most %d", name, calls.Load(), elapsed, admitted[0].Load(), bound)
					}
				}
				if st.opts != nil {
					if s := e.Stats(); s.Flushes == 0 || s.FlushErrors != 0 {
						t.Errorf("durable tier: %d flushes, %d failed; want some, none failed", s.Flushes, s.FlushErrors)
					}
				}
			})
		}
	}
}
