package redis_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/engine"
)

// TestLeasesFleetWide: three engines, each with its own connections and
// last-seen records as three gateways would have, share a concurrency
// limit of 10 on one key through a real redis-server. Their callers take a
// slot, call the upstream (which counts the requests in flight) and give
// the slot back: the upstream never sees more than 10 at once, and every
// slot comes back.
func TestLeasesFleetWide(t *testing.T) {
	addr := server(t).Addr
	o := redis.Options{KeyPrefix: fmt.Sprintf("%s%d:", prefix(t), time.Now().UnixNano())} // a fresh key on every run
	const gateways, callers, each, n = 3, 8, 25, 10
	var es []*engine.Engine
	for range gateways {
		// Every acquisition and every release writes the key, from three
		// engines at once, on the default retries: a conflict is retried
		// at once on the record it returned.
		es = append(es, newEngine(t, open(t, []string{addr}, o), engine.Options{}))
	}
	l := engine.Limit{Namespace: "inflight", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: n, Window: time.Minute})}
	ctx := context.Background()

	var inFlight, peak, admitted, denied atomic.Int64
	upstream := func() {
		c := inFlight.Add(1)
		for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
		}
		time.Sleep(200 * time.Microsecond) // a request's work, long enough to overlap others
		inFlight.Add(-1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, gateways*callers)
	for _, e := range es {
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					ls, err := e.Acquire(ctx, l, "tenant")
					if err != nil {
						errs <- err
						return
					}
					if !ls.Decision.Allowed {
						denied.Add(1)
						continue
					}
					admitted.Add(1)
					upstream()
					if _, err := ls.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d admitted, %d denied, at most %d in flight", admitted.Load(), denied.Load(), peak.Load())
	for i, e := range es {
		s := e.Stats()
		t.Logf("gateway %d: %d swaps, %d conflicts, %d local denials", i, s.Swaps, s.Conflicts, s.LocalDenials)
	}
	if peak.Load() > n || admitted.Load() < n {
		t.Fatalf("peak %d in flight at the upstream (limit %d), %d admitted", peak.Load(), n, admitted.Load())
	}
	// Every slot came back: the fleet takes all ten again.
	for i := range n {
		ls, err := es[i%gateways].Acquire(ctx, l, "tenant")
		for deadline := time.Now().Add(10 * time.Second); err == nil && !ls.Decision.Allowed && time.Now().Before(deadline); {
			// A gateway may deny from the record it saw last until the
			// others' releases reach it.
			time.Sleep(time.Millisecond)
			ls, err = es[i%gateways].Acquire(ctx, l, "tenant")
		}
		if err != nil || !ls.Decision.Allowed {
			t.Fatalf("slot %d after every release: %+v, %v", i, ls, err)
		}
	}
	if ls, err := es[0].Acquire(ctx, l, "tenant"); err != nil || ls.Decision.Allowed {
		t.Fatalf("an eleventh slot: %+v, %v", ls, err)
	}
}

// TestReleaseReachesOthers: a gateway denied a slot answers the next
// denials from the record it saw last, with no round trip; another
// gateway's release announces itself, and the first takes the slot.
func TestReleaseReachesOthers(t *testing.T) {
	addr := server(t).Addr
	o := redis.Options{KeyPrefix: prefix(t)}
	a := newEngine(t, open(t, []string{addr}, o), engine.Options{})
	b := newEngine(t, open(t, []string{addr}, o), engine.Options{})
	ctx := context.Background()
	l := engine.Limit{Namespace: "inflight", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: 1, Window: time.Hour})}
	held, err := a.Acquire(ctx, l, "k")
	if err != nil || !held.Decision.Allowed {
		t.Fatalf("a's slot: %+v, %v", held, err)
	}
	for range 2 {
		if ls, err := b.Acquire(ctx, l, "k"); err != nil || ls.Decision.Allowed {
			t.Fatalf("b's slot: %+v, %v; want denied", ls, err)
		}
	}
	if b.Stats().LocalDenials == 0 {
		t.Fatalf("b's repeated request was not denied locally: %+v", b.Stats())
	}
	if freed, err := held.Release(ctx); !freed || err != nil {
		t.Fatalf("a's release: %v, %v", freed, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ls, err := b.Acquire(ctx, l, "k")
		if err != nil {
			t.Fatal(err)
		}
		if ls.Decision.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after a's release, b still denies the slot: %+v", ls.Decision)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkAcquireRelease counts the compare-and-swaps of a slot taken and
// given back on an idle key by one caller: one each.
func BenchmarkAcquireRelease(b *testing.B) {
	addr := server(b).Addr
	e := newEngine(b, open(b, []string{addr}, redis.Options{}), engine.Options{})
	l := engine.Limit{Namespace: "inflight", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: 4, Window: time.Minute})}
	ctx := context.Background()
	var ls engine.Lease
	before := e.Stats().Swaps
	b.ResetTimer()
	for range b.N {
		if err := e.AcquireInto(ctx, l, "k", &ls); err != nil || !ls.Decision.Allowed {
			b.Fatalf("%+v, %v", ls.Decision, err)
		}
		if _, err := ls.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(e.Stats().Swaps-before)/float64(b.N), "swaps/op")
}

// TestLeaseModelOnRedis: random acquisitions and releases (of leases held
// and released already, through the Lease or by id) on a real
// redis-server, from two engines sharing it, answer as a model set of
// leases does: allowed exactly when fewer than the limit are held, a
// release frees a slot exactly once. (The hold is an hour: the store's
// clock is the server's, and no lease expires during a run; expiry is
// checked on a fake clock over every other store.)
func TestLeaseModelOnRedis(t *testing.T) {
	addr := server(t).Addr
	o := redis.Options{KeyPrefix: fmt.Sprintf("%s%d:", prefix(t), time.Now().UnixNano())}
	es := []*engine.Engine{
		newEngine(t, open(t, []string{addr}, o), engine.Options{}),
		newEngine(t, open(t, []string{addr}, o), engine.Options{}),
	}
	ctx := context.Background()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		key := fmt.Sprintf("k%d", run)
		n := rapid.Int64Range(1, 4).Draw(rt, "limit")
		l := engine.Limit{Namespace: "inflight", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: n, Window: time.Hour})}
		var held []*engine.Lease
		live := map[int64]bool{}
		for i := range rapid.IntRange(1, 30).Draw(rt, "ops") {
			e := es[rapid.IntRange(0, 1).Draw(rt, "engine")]
			if len(held) == 0 || rapid.Bool().Draw(rt, "acquire") {
				want := int64(len(live)) < n
				ls, err := e.Acquire(ctx, l, key)
				if err != nil {
					rt.Fatalf("op %d: %v", i, err)
				}
				if ls.Decision.Allowed && !want {
					rt.Fatalf("op %d: allowed %v with %d of %d held", i, ls.Decision.Allowed, len(live), n)
				}
				if !ls.Decision.Allowed && want {
					// A denial from the record this engine saw last,
					// before another's release reached it: retry at the
					// store (the release's announcement travels).
					deadline := time.Now().Add(10 * time.Second)
					for !ls.Decision.Allowed && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
						if ls, err = e.Acquire(ctx, l, key); err != nil {
							rt.Fatal(err)
						}
					}
					if !ls.Decision.Allowed {
						rt.Fatalf("op %d: denied with %d of %d held", i, len(live), n)
					}
				}
				if ls.Decision.Allowed {
					if live[ls.ID] {
						rt.Fatalf("op %d: id %d issued twice", i, ls.ID)
					}
					live[ls.ID] = true
					held = append(held, ls)
				}
				continue
			}
			ls := rapid.SampledFrom(held).Draw(rt, "lease")
			want := live[ls.ID]
			var freed bool
			var err error
			if rapid.Bool().Draw(rt, "by id") {
				freed, err = e.Release(ctx, l, key, ls.ID)
			} else {
				freed, err = ls.Release(ctx)
			}
			if err != nil || freed != want {
				rt.Fatalf("op %d: release of %d (held %v): %v, %v", i, ls.ID, want, freed, err)
			}
			delete(live, ls.ID)
		}
	})
}
