package engine_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
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
		if d, err := e.Apply(before, "u-1", 1); err != nil || !d.Allowed {
			t.Fatalf("request %d under 60 a minute: %+v, %v", i, d, err)
		}
	}
	expectDenied(t, e, after, loweredRetry, "first request after lowering")
	return before, after
}

func expectDenied(t *testing.T, e *engine.Engine, l engine.Limit, retry time.Duration, what string) {
	t.Helper()
	d, err := e.Apply(l, "u-1", 1)
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
		if d, err := e.Peek(after, "u-1", 1); err != nil || d.Allowed {
			t.Fatalf("peek 30 s later: %+v, %v; want denied", d, err)
		}
		clock.Advance(loweredRetry - 30*time.Second)
		if d, err := e.Apply(after, "u-1", 1); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("at the RetryAfter: %+v, %v; want allowed with nothing left", d, err)
		}
	})
	// The same through ApplyAll, whose denial spends nothing on either
	// key: the denied record is kept all the same, on the striped path and
	// on the compare-and-swap path.
	for _, b := range []store{backends[0], {"swap", openSwapStore}} {
		t.Run(b.name+"/ApplyAll", func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			e := openEngine(t, b.open, clock)
			before := limit(algo.TokenBucketName, sixtyPerMinute, "orders")
			after := limit(algo.TokenBucketName, fivePerMinute, "orders")
			for range 20 {
				e.Apply(before, "u-1", 1)
			}
			ds, all, err := e.ApplyAll([]engine.Request{{Limit: after, Key: "u-2", Cost: 1}, {Limit: after, Key: "u-1", Cost: 1}})
			if err != nil || all || ds[1].RetryAfter != loweredRetry {
				t.Fatalf("ApplyAll after lowering: %+v, %v, %v; want u-1 denied for %v", ds, all, err, loweredRetry)
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
		if d, err := other.Apply(after, "u-1", 1); err != nil || !d.Allowed || d.Remaining != 0 {
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
				if d, err := e.Apply(after, "u-1", 1); err != nil || !d.Allowed || d.Remaining != 0 {
					t.Fatalf("at the RetryAfter: %+v, %v; want allowed with nothing left", d, err)
				}
			})
		}
	}
}
