package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/engine"
)

// TestRefundReachesOthers: a key spent to denial by one process is denied
// in another from its last-seen record, with no round trip; the first
// settles its reservation below the estimate, and the refund's swap
// announces it, so the second stops answering the denial locally and
// allows the key again (it would otherwise deny it for most of the hour).
func TestRefundReachesOthers(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { refundReachesOthers(t, []string{server(t).Addr}) })
	// On a Cluster the script runs on the key's node, and its PUBLISH
	// reaches the watchers subscribed on the others.
	t.Run("cluster", func(t *testing.T) { refundReachesOthers(t, cluster(t).Addrs()) })
}

func refundReachesOthers(t *testing.T, addrs []string) {
	o := redis.Options{KeyPrefix: prefix(t)}
	a := newEngine(t, open(t, addrs, o), engine.Options{})
	b := newEngine(t, open(t, addrs, o), engine.Options{})
	ctx := context.Background()
	for _, name := range []algo.Name{algo.TokenBucketName, algo.FixedWindowName, algo.SlidingLogName} {
		t.Run(string(name), func(t *testing.T) {
			l := engine.Limit{Namespace: string(name), Algorithm: algo.MustNew(name, algo.Params{Limit: 10, Window: time.Hour})}
			r, err := a.Reserve(ctx, l, "k", 10)
			if err != nil || !r.Decision.Allowed {
				t.Fatalf("Reserve(10) = %+v, %v", r, err)
			}
			for range 2 {
				if d, err := b.Apply(ctx, l, "k", 1); err != nil || d.Allowed {
					t.Fatalf("b's request: %+v, %v; want denied", d, err)
				}
			}
			before := b.Stats().LocalDenials
			if d, _ := b.Apply(ctx, l, "k", 1); d.Allowed || b.Stats().LocalDenials != before+1 {
				t.Fatalf("b's repeated request was not denied locally: %+v, %+v", d, b.Stats())
			}
			s, err := r.Settle(ctx, 2)
			if err != nil || s.Refunded < 7 {
				t.Fatalf("Settle(2) = %+v, %v; want about 8 refunded", s, err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				d, err := b.Apply(ctx, l, "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("10s after another process's refund, b still denies the key: %+v", d)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// TestSettleRidesTheQueue: settles of one key queued behind a swap in
// flight are committed with the requests queued with them, so that a busy
// key's settles cost no round trip of their own; the sum holds exactly.
func TestSettleRidesTheQueue(t *testing.T) {
	addr := server(t).Addr
	e := newEngine(t, open(t, []string{addr}, redis.Options{KeyPrefix: prefix(t)}), engine.Options{})
	ctx := context.Background()
	l := engine.Limit{Namespace: "q", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 1000, Window: time.Hour})}
	const n = 50
	rs := make([]*engine.Reservation, n)
	for i := range rs {
		r, err := e.Reserve(ctx, l, "k", 10)
		if err != nil || !r.Decision.Allowed {
			t.Fatalf("Reserve: %+v, %v", r, err)
		}
		rs[i] = r
	}
	swaps := e.Stats().Swaps
	errs := make(chan error, n)
	for _, r := range rs {
		go func() {
			_, err := r.Settle(ctx, 4) // 6 back each
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sent := e.Stats().Swaps - swaps
	d, err := e.Peek(ctx, l, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(1000 - n*4 - 1); d.Remaining != want {
		t.Fatalf("after %d settles of 10 to 4, a request of 1 leaves %d; want %d", n, d.Remaining, want)
	}
	t.Logf("%d concurrent settles of one key took %d compare-and-swaps", n, sent)
	if sent > n {
		t.Fatalf("%d settles took %d compare-and-swaps", n, sent)
	}
}

// TestReserveSettleModel: a fleet of two engines on Redis, reserving,
// applying and settling on the same keys in random interleavings, answers
// every reservation and settlement exactly as one engine on the memory
// store does. Every denial is confirmed against the store, so that no
// answer comes from a last-seen record another engine has made stale
// (TestRefundReachesOthers covers those).
func TestReserveSettleModel(t *testing.T) {
	addr := server(t).Addr
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		limits := genLimits(rt)
		clock := engine.NewFakeClock(t0)
		o := redis.Options{KeyPrefix: fmt.Sprintf("%s%d:", prefix(t), run), EngineClock: true, Timeout: testTimeout}
		var fleet []*engine.Engine
		for range 2 {
			s, err := redis.Open(redis.ClientOptions{Addrs: []string{addr}}, &o)
			if err != nil {
				rt.Fatal(err)
			}
			e, err := engine.New(s, &engine.Options{Clock: clock, Swap: engine.SwapOptions{ConfirmDenials: true}})
			if err != nil {
				s.Close()
				rt.Fatal(err)
			}
			rt.Cleanup(func() { e.Close() })
			fleet = append(fleet, e)
		}
		one, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock})
		if err != nil {
			rt.Fatal(err)
		}
		defer one.Close()
		ctx := context.Background()
		type pair struct{ fleet, one *engine.Reservation }
		var open []pair
		for i := range rapid.IntRange(1, 60).Draw(rt, "ops") {
			e := fleet[rapid.IntRange(0, 1).Draw(rt, "engine")]
			l := rapid.SampledFrom(limits).Draw(rt, "limit")
			key := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "key")
			cost := rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(rt, "cost")
			var got, want string
			switch op := rapid.IntRange(0, 4).Draw(rt, "op"); {
			case op == 0:
				clock.Advance(time.Duration(rapid.SampledFrom([]int64{0, 1, 5e5, 1e6, 7e8, 1e9, 3e9, 60e9}).Draw(rt, "step")))
				continue
			case op == 1:
				d1, err1 := e.Apply(ctx, l, key, cost)
				d2, err2 := one.Apply(ctx, l, key, cost)
				got, want = fmt.Sprintf("%+v %v", d1, err1), fmt.Sprintf("%+v %v", d2, err2)
			case op == 2 || len(open) == 0:
				r1, err1 := e.Reserve(ctx, l, key, cost)
				r2, err2 := one.Reserve(ctx, l, key, cost)
				if err1 != nil || err2 != nil {
					rt.Fatalf("op %d: Reserve: %v, %v", i, err1, err2)
				}
				got = fmt.Sprintf("%+v at %d", r1.Decision, r1.At)
				want = fmt.Sprintf("%+v at %d", r2.Decision, r2.At)
				if r1.Decision.Allowed {
					open = append(open, pair{r1, r2})
				}
			default:
				j := rapid.IntRange(0, len(open)-1).Draw(rt, "which")
				p := open[j]
				open = append(open[:j], open[j+1:]...)
				actual := rapid.Int64Range(0, 3*p.one.Limit.Algorithm.Params().Capacity()).Draw(rt, "actual")
				s1, err1 := p.fleet.Settle(ctx, actual)
				s2, err2 := p.one.Settle(ctx, actual)
				got, want = fmt.Sprintf("%+v %v", s1, err1), fmt.Sprintf("%+v %v", s2, err2)
			}
			if got != want {
				rt.Fatalf("op %d: the fleet on Redis answered\n %s\none engine on memory answers\n %s", i, got, want)
			}
		}
	})
}
