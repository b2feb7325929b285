package engine_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// TestLeaseModel drives the engine over every store (memory, the plain
// path, the compare-and-swap path, Pebble, bbolt) through random
// interleavings of acquisitions, releases (of leases held, released
// already, expired) and a clock that moves forward, against a model set of
// leases per key: an acquisition is allowed exactly when fewer than the
// limit are held unexpired, so never more than the limit are; a release
// frees a slot once, and only while its lease is live; an expired lease's
// slot comes back by itself.
func TestLeaseModel(t *testing.T) {
	for _, bk := range settleStores(t) {
		t.Run(bk.name, func(t *testing.T) {
			fewerChecksOnDiskUnderRace(t, bk.name)
			rapid.Check(t, func(rt *rapid.T) {
				n := rapid.Int64Range(1, 5).Draw(rt, "limit")
				hold := time.Duration(rapid.Int64Range(1, 5e9).Draw(rt, "hold"))
				l := limit(algo.ConcurrencyName, algo.Params{Limit: n, Window: hold}, "inflight")
				clock := engine.NewFakeClock(t0)
				e, err := engine.New(bk.open(clock), &engine.Options{Clock: clock, Stripes: 4, FlushInterval: time.Hour})
				if err != nil {
					rt.Fatal(err)
				}
				defer e.Close()
				ctx := context.Background()
				type held struct {
					ls     *engine.Lease
					expiry int64
					done   bool
				}
				leases := map[string][]*held{}
				live := func(key string) int64 {
					c := int64(0)
					for _, h := range leases[key] {
						if !h.done && h.expiry > clock.Now() {
							c++
						}
					}
					return c
				}
				for i := range rapid.IntRange(1, 60).Draw(rt, "ops") {
					key := rapid.SampledFrom(propKeys).Draw(rt, "key")
					switch rapid.IntRange(0, 3).Draw(rt, "op") {
					case 0:
						clock.Advance(time.Duration(rapid.Int64Range(0, 2*int64(hold)).Draw(rt, "step")))
					case 1, 2:
						want := live(key) < n
						ls, err := e.Acquire(ctx, l, key)
						if err != nil {
							rt.Fatalf("op %d: Acquire: %v", i, err)
						}
						if ls.Decision.Allowed != want {
							rt.Fatalf("op %d: Acquire %q with %d live of %d: %+v", i, key, live(key), n, ls.Decision)
						}
						if want {
							if ls.Decision.Remaining != n-live(key)-1 {
								rt.Fatalf("op %d: Remaining %d with %d live", i, ls.Decision.Remaining, live(key))
							}
							leases[key] = append(leases[key], &held{ls: ls, expiry: clock.Now() + int64(hold)})
						} else if freed, err := ls.Release(ctx); freed || err != nil {
							rt.Fatalf("op %d: Release of a denial: %v, %v", i, freed, err)
						}
					case 3:
						hs := leases[key]
						if len(hs) == 0 {
							continue
						}
						h := rapid.SampledFrom(hs).Draw(rt, "lease")
						want := !h.done && h.expiry > clock.Now()
						var freed bool
						var err error
						if rapid.Bool().Draw(rt, "by id") {
							freed, err = e.Release(ctx, l, key, h.ls.ID)
						} else {
							freed, err = h.ls.Release(ctx)
						}
						if err != nil || freed != want {
							rt.Fatalf("op %d: Release of %d (done %v, expiry %d, now %d) = %v, %v", i, h.ls.ID, h.done, h.expiry, clock.Now(), freed, err)
						}
						h.done = true
					}
				}
			})
		})
	}
}

// TestLeasesInFlight: goroutines taking and giving back slots of one key at
// once, on a frozen clock (no lease expires), never hold more than the
// limit between them, on every store, and the slots all come back.
func TestLeasesInFlight(t *testing.T) {
	const workers, each, n = 8, 40, 3
	for _, bk := range settleStores(t) {
		t.Run(bk.name, func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			e := openEngine(t, bk.open, clock)
			l := limit(algo.ConcurrencyName, algo.Params{Limit: n, Window: time.Minute}, "inflight")
			ctx := context.Background()
			var inFlight, peak, admitted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						ls, err := e.Acquire(ctx, l, "k")
						if err != nil {
							errs <- err
							return
						}
						if !ls.Decision.Allowed {
							continue
						}
						admitted.Add(1)
						c := inFlight.Add(1)
						for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
						}
						inFlight.Add(-1)
						if freed, err := ls.Release(ctx); err != nil || !freed {
							errs <- errors.Join(err, errors.New("a live lease freed nothing"))
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if peak.Load() > n || admitted.Load() == 0 {
				t.Fatalf("peak %d in flight (limit %d), %d admitted", peak.Load(), n, admitted.Load())
			}
			for i := range n {
				if ls, err := e.Acquire(ctx, l, "k"); err != nil || !ls.Decision.Allowed {
					t.Fatalf("slot %d after every release: %+v, %v", i, ls, err)
				}
			}
		})
	}
}

// TestLeaseExpires: a lease held past its maximum hold has given its slot
// back, and its release frees nothing and is counted.
func TestLeaseExpires(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	e := openEngine(t, backends[0].open, clock)
	l := limit(algo.ConcurrencyName, algo.Params{Limit: 1, Window: 30 * time.Second}, "inflight")
	ctx := context.Background()
	hung, _ := e.Acquire(ctx, l, "k")
	if d, _ := e.Acquire(ctx, l, "k"); d.Decision.Allowed || d.Decision.RetryAfter != 30*time.Second {
		t.Fatalf("second slot: %+v", d.Decision)
	}
	clock.Advance(30*time.Second - 1)
	if d, _ := e.Acquire(ctx, l, "k"); d.Decision.Allowed {
		t.Fatal("a slot came back before the hold")
	}
	clock.Advance(1)
	next, _ := e.Acquire(ctx, l, "k")
	if !next.Decision.Allowed || next.ID == hung.ID {
		t.Fatalf("after the hold: %+v (id %d, the hung one's %d)", next.Decision, next.ID, hung.ID)
	}
	if freed, err := hung.Release(ctx); freed || err != nil {
		t.Fatalf("late release freed %v, %v", freed, err)
	}
	if d, _ := e.Acquire(ctx, l, "k"); d.Decision.Allowed {
		t.Fatal("the late release freed the new holder's slot")
	}
	if got := e.Stats().LeasesExpired; got != 1 {
		t.Fatalf("LeasesExpired = %d, want 1", got)
	}
}

func TestAcquireRefusesOtherLimits(t *testing.T) {
	e := openEngine(t, backends[0].open, engine.NewFakeClock(t0))
	l := limit(algo.TokenBucketName, algo.Params{Limit: 3, Window: time.Second}, "tb")
	if _, err := e.Acquire(context.Background(), l, "k"); !errors.Is(err, engine.ErrNotConcurrency) {
		t.Fatalf("Acquire on a token bucket: %v", err)
	}
	if _, err := e.Release(context.Background(), l, "k", 1); !errors.Is(err, engine.ErrNotConcurrency) {
		t.Fatalf("Release on a token bucket: %v", err)
	}
}
