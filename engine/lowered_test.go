package engine_test

import (
	"context"
	"runtime"
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

// A token bucket's caller who spent 20 at 60 a minute, when the rule is
// lowered to 5 a minute, waits for 16 of them to refill at the new rate:
// 192 s. The record was written to expire when 20 had refilled at the old
// rate, after 20 s; the denial must keep it until the caller is full again,
// or at 20 s the store forgets it and the caller has 5 again, long before
// the RetryAfter it was told.
var (
	sixtyPerMinute = algo.Params{Limit: 60, Window: time.Minute}
	loweredRetry   = 192 * time.Second
)

// spendThenLower spends 20 under 60 a minute at t0, then checks the first
// request under 5 a minute.
func spendThenLower(t *testing.T, e *engine.Engine) (before, after engine.Limit) {
	t.Helper()
	before = limit(algo.TokenBucketName, sixtyPerMinute, "orders")
	after = limit(algo.TokenBucketName, fivePerMinute, "orders")
	for i := range 20 {
		if d, err := e.Apply(context.Background(), before, "u-1", 1); err != nil || !d.Allowed {
			t.Fatalf("request %d under 60 a minute: %+v, %v", i, d, err)
		}
	}
	expectDenied(t, e, after, loweredRetry, "first request after lowering")
	return before, after
}

func expectDenied(t *testing.T, e *engine.Engine, l engine.Limit, retry time.Duration, what string) {
	t.Helper()
	d, err := e.Apply(context.Background(), l, "u-1", 1)
	if err != nil || d.Allowed || d.RetryAfter != retry {
		t.Fatalf("%s: %+v, %v; want denied, RetryAfter %v", what, d, err, retry)
	}
}

func TestLoweredRateKeepsTheDenial(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		clock := engine.NewFakeClock(t0)
		e := newEngine(t, memory.New(&memory.Options{SweepInterval: -1, Shards: 16}), clock)
		_, after := spendThenLower(t, e)
		clock.Advance(30 * time.Second) // past the expiry written at 60 a minute
		expectDenied(t, e, after, loweredRetry-30*time.Second, "30 s later")
		// Peek takes the striped path's read: the same record.
		if d, err := e.Peek(context.Background(), after, "u-1", 1); err != nil || d.Allowed {
			t.Fatalf("peek 30 s later: %+v, %v; want denied", d, err)
		}
		clock.Advance(loweredRetry - 30*time.Second)
		if d, err := e.Apply(context.Background(), after, "u-1", 1); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("at the RetryAfter: %+v, %v; want allowed with nothing left", d, err)
		}
	})
	// The same through ApplyAll, whose denial spends nothing on either
	// key: the denied record is kept all the same, on the striped path (a
	// bare memory store, and one behind faulty's wrapper) and on the
	// compare-and-swap path.
	for _, b := range []store{backends[0], backends[1], {"swap", openSwapStore}} {
		t.Run(b.name+"/ApplyAll", func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			e := openEngine(t, b.open, clock)
			before := limit(algo.TokenBucketName, sixtyPerMinute, "orders")
			after := limit(algo.TokenBucketName, fivePerMinute, "orders")
			for range 20 {
				e.Apply(context.Background(), before, "u-1", 1)
			}
			ds, all, err := e.ApplyAll(context.Background(), []engine.Request{{Limit: after, Key: "u-2", Cost: 1}, {Limit: after, Key: "u-1", Cost: 1}})
			if err != nil || all || ds[1].RetryAfter != loweredRetry {
				t.Fatalf("ApplyAll after lowering: %+v, %v, %v; want u-1 denied for %v", ds, all, err, loweredRetry)
			}
			if b.name == "swap" {
				// The store keeps the record as long as the denial said,
				// and the engine knows it: the next denial needs no swap.
				swaps := e.Stats().Swaps
				expectDenied(t, e, after, loweredRetry, "right after")
				if st := e.Stats(); st.Swaps != swaps {
					t.Errorf("a denial after ApplyAll's sent %d swaps, want 0 (answered from the last-seen record)", st.Swaps-swaps)
				}
			}
			clock.Advance(30 * time.Second)
			expectDenied(t, e, after, loweredRetry-30*time.Second, "30 s later")
		})
	}

	// A fleet over a compare-and-swap store: the first engine's denial
	// lengthens the store's expiry, so a second engine, which never saw the
	// record, finds it 30 s later and denies too.
	t.Run("swap", func(t *testing.T) {
		clock := engine.NewFakeClock(t0)
		store := openSwapStore(clock)
		e := newEngine(t, store, clock)
		_, after := spendThenLower(t, e)
		clock.Advance(30 * time.Second)
		other := newEngine(t, store, clock)
		expectDenied(t, other, after, loweredRetry-30*time.Second, "30 s later, on another engine")
		expectDenied(t, e, after, loweredRetry-30*time.Second, "30 s later, on the first engine")
		clock.Advance(loweredRetry - 30*time.Second)
		if d, err := other.Apply(context.Background(), after, "u-1", 1); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("at the RetryAfter: %+v, %v; want allowed with nothing left", d, err)
		}
	})
	for _, ds := range durables {
		for _, mode := range modes {
			t.Run(ds.name+"/"+mode.String(), func(t *testing.T) {
				dir := t.TempDir()
				clock := engine.NewFakeClock(t0)
				e := openDurable(t, ds.open(t, dir), clock, mode)
				_, after := spendThenLower(t, e)
				// The disk keeps the record as long: a restart after the
				// old expiry still finds it.
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				clock.Advance(30 * time.Second)
				e = openDurable(t, ds.open(t, dir), clock, mode)
				defer e.Close()
				expectDenied(t, e, after, loweredRetry-30*time.Second, "30 s later, after a restart")
				clock.Advance(loweredRetry - 30*time.Second)
				if d, err := e.Apply(context.Background(), after, "u-1", 1); err != nil || !d.Allowed || d.Remaining != 0 {
					t.Fatalf("at the RetryAfter: %+v, %v; want allowed with nothing left", d, err)
				}
			})
		}
	}
}

// TestLoweredRateInOneBatch: on the compare-and-swap path, requests queued
// on one key are decided by one leader in one swap. When an admission under
// the old rule and a denial under the lowered one share a batch, the record
// the batch writes is kept until the denied caller is full again, not only
// as long as the admission needs.
func TestLoweredRateInOneBatch(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	var hold atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Before: func(*backendtest.SwapStore, []backend.Swap) {
		if hold.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
	}})
	e := newEngine(t, store, clock)
	before := limit(algo.TokenBucketName, sixtyPerMinute, "orders")
	after := limit(algo.TokenBucketName, fivePerMinute, "orders")
	for range 20 {
		if d, err := e.Apply(context.Background(), before, "u-1", 1); err != nil || !d.Allowed {
			t.Fatalf("spending under 60 a minute: %+v, %v", d, err)
		}
	}
	// A leader held in its swap; two callers queue behind it.
	hold.Store(true)
	var wg sync.WaitGroup
	var admitted, denied algo.Decision
	wg.Go(func() { e.Apply(context.Background(), before, "u-1", 1) })
	<-entered
	wg.Go(func() { admitted, _ = e.Apply(context.Background(), before, "u-1", 1) })
	waitQueued(t, e, before, 1)
	wg.Go(func() { denied, _ = e.Apply(context.Background(), after, "u-1", 1) })
	waitQueued(t, e, before, 2)
	close(release)
	wg.Wait()
	if !admitted.Allowed || denied.Allowed || denied.RetryAfter < time.Minute {
		t.Fatalf("the batch: admitted %+v, denied %+v; want one admission under the old rule and a denial of minutes under the new", admitted, denied)
	}
	clock.Advance(30 * time.Second)
	other := newEngine(t, store, clock)
	if d, err := other.Apply(context.Background(), after, "u-1", 1); err != nil || d.Allowed {
		t.Fatalf("30 s later on another engine: %+v, %v; want still denied (told to wait %v)", d, err, denied.RetryAfter)
	}
}

// waitQueued waits until n callers are queued on key under l.
func waitQueued(t *testing.T, e *engine.Engine, l engine.Limit, n int) {
	t.Helper()
	for engine.Queued(e, l, "u-1") < n {
		runtime.Gosched()
	}
}

// TestLoweredRateSyncCommitsTheKeep: in Sync mode a longer expiry is a
// write like any other, committed before the denial is answered: a crash
// right after it cannot leave the old expiry on disk and hand the caller
// its whole capacity after a restart.
func TestLoweredRateSyncCommitsTheKeep(t *testing.T) {
	for _, ds := range durables {
		t.Run(ds.name, func(t *testing.T) {
			s := ds.open(t, t.TempDir())
			clock := engine.NewFakeClock(t0)
			e := openDurable(t, s, clock, engine.Sync)
			defer e.Close()
			spendThenLower(t, e)
			v, _, err := s.Load(engine.AppendKey(nil, "orders", "u-1"), clock.Now()+int64(30*time.Second))
			if err != nil || v == nil {
				t.Fatalf("the disk's record 30 s after the denial: %x, %v; want it kept", v, err)
			}
		})
	}
}
