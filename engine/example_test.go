package engine_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// An engine over the memory store, on a fake clock so the output is fixed.
// The engine owns the store: Close closes it. A stripe count that is not a
// power of two is refused.
func ExampleNew() {
	clock := engine.NewFakeClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	e, err := engine.New(memory.New(nil), &engine.Options{Clock: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	l := engine.Limit{Namespace: "login", Algorithm: algo.MustNew(algo.GCRAName, algo.Params{Limit: 3, Window: time.Minute})}
	d, _ := e.Apply(context.Background(), l, "203.0.113.7", 1)
	fmt.Println(d.Allowed, d.Remaining, e.Len(), "key")

	store := memory.New(nil)
	defer store.Close() // New failed: the store is still the caller's
	_, err = engine.New(store, &engine.Options{Stripes: 12})
	fmt.Println(err)
	// Output:
	// true 2 1 key
	// sluice/engine: stripes must be a power of two, got 12
}

// Five requests a minute per caller with a token bucket: the sixth is
// denied, with the time until one token is back.
func ExampleEngine_Apply() {
	clock := engine.NewFakeClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	e, _ := engine.New(memory.New(nil), &engine.Options{Clock: clock})
	defer e.Close()
	l := engine.Limit{
		Namespace: "orders-write",
		Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 5, Window: time.Minute}),
	}
	for i := 1; i <= 6; i++ {
		d, err := e.Apply(context.Background(), l, "user-42", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("request %d: allowed %v, remaining %d, retry after %v\n", i, d.Allowed, d.Remaining, d.RetryAfter)
	}
	clock.Advance(12 * time.Second)
	d, _ := e.Apply(context.Background(), l, "user-42", 1)
	fmt.Printf("12s later: allowed %v\n", d.Allowed)
	_, err := e.Apply(context.Background(), l, "user-42", 6)
	fmt.Println("cost 6 of 5:", errors.Is(err, engine.ErrCostExceedsCapacity))
	// Output:
	// request 1: allowed true, remaining 4, retry after 0s
	// request 2: allowed true, remaining 3, retry after 0s
	// request 3: allowed true, remaining 2, retry after 0s
	// request 4: allowed true, remaining 1, retry after 0s
	// request 5: allowed true, remaining 0, retry after 0s
	// request 6: allowed false, remaining 0, retry after 12s
	// 12s later: allowed true
	// cost 6 of 5: true
}

// A request charged to a caller and to a shared pool at once: when the pool
// is spent, the caller's budget is left untouched.
func ExampleEngine_ApplyAll() {
	clock := engine.NewFakeClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	e, _ := engine.New(memory.New(nil), &engine.Options{Clock: clock})
	defer e.Close()
	user := engine.Limit{Namespace: "per-user", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 10, Window: time.Minute})}
	pool := engine.Limit{Namespace: "pool", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 2, Window: time.Minute})}
	for i := 1; i <= 3; i++ {
		ds, all, err := e.ApplyAll(context.Background(), []engine.Request{
			{Limit: user, Key: "user-42", Cost: 1},
			{Limit: pool, Key: "all", Cost: 1},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("call %d: all %v; user %v, pool %v\n", i, all, ds[0].Allowed, ds[1].Allowed)
	}
	d, _ := e.Peek(context.Background(), user, "user-42", 1)
	fmt.Println("user remaining after the peeked request:", d.Remaining)
	// Output:
	// call 1: all true; user true, pool true
	// call 2: all true; user true, pool true
	// call 3: all false; user true, pool false
	// user remaining after the peeked request: 7
}

// A caller's key prepared once and decided again and again into the
// caller's own Decision: the same answers as Apply, without building or
// hashing the key, or copying the decision out, on every request.
func ExampleEngine_ApplyKeyInto() {
	clock := engine.NewFakeClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	e, _ := engine.New(memory.New(nil), &engine.Options{Clock: clock})
	defer e.Close()
	l := engine.Limit{
		Namespace: "search",
		Algorithm: algo.MustNew(algo.GCRAName, algo.Params{Limit: 2, Window: time.Second}),
	}
	k := l.Key("session-9f2c") // where the session is kept
	var d algo.Decision
	for i := 1; i <= 3; i++ {
		if err := e.ApplyKeyInto(context.Background(), l, &k, 1, &d); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("request %d: allowed %v, retry after %v\n", i, d.Allowed, d.RetryAfter)
	}
	// Apply sees the same caller's budget.
	d, _ = e.Apply(context.Background(), l, k.String(), 1)
	fmt.Println("by Apply:", d.Allowed)
	// Output:
	// request 1: allowed true, retry after 0s
	// request 2: allowed true, retry after 0s
	// request 3: allowed false, retry after 500ms
	// by Apply: false
}

// A tokens-per-minute limit for a language-model API: each request
// reserves what it may cost (the prompt's tokens plus its max_tokens),
// and settles with what the response's usage.total_tokens says it cost.
// A sliding counter refunds exactly within its window, however long the
// request took.
// A response that cost less gives the rest back; one that cost more
// (the prompt was longer than estimated) puts the key in debt, and its
// next request waits until the debt has refilled.
func ExampleEngine_Reserve() {
	clock := engine.NewFakeClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	e, _ := engine.New(memory.New(nil), &engine.Options{Clock: clock})
	defer e.Close()
	ctx := context.Background()
	tpm := engine.Limit{
		Namespace: "tokens-per-minute",
		Algorithm: algo.MustNew(algo.SlidingCounterName, algo.Params{Limit: 10_000, Window: time.Minute}),
	}
	for _, call := range []struct{ prompt, maxTokens, totalTokens int64 }{
		{1000, 4000, 1800}, // used less than reserved: 3200 back
		{1000, 4000, 9000}, // used more: 4000 more, 800 past the limit, which weighs in the next window too
		{1000, 4000, 0},
	} {
		r, err := e.Reserve(ctx, tpm, "api-key-1", call.prompt+call.maxTokens)
		if err != nil {
			fmt.Println(err)
			return
		}
		if !r.Decision.Allowed {
			fmt.Printf("reserve %d: denied, retry after %v\n", r.Estimate, r.Decision.RetryAfter)
			continue
		}
		// ... call the model, read usage.total_tokens from the response ...
		s, err := r.Settle(ctx, call.totalTokens)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("reserve %d, used %d: refunded %d, charged %d, remaining %d\n",
			r.Estimate, call.totalTokens, s.Refunded, s.Charged, s.Decision.Remaining)
	}
	// Output:
	// reserve 5000, used 1800: refunded 3200, charged 0, remaining 8200
	// reserve 5000, used 9000: refunded 0, charged 4000, remaining 0
	// reserve 5000: denied, retry after 1m32.222222223s
}

// At most two requests of a key in flight at once: Acquire takes a slot as
// a lease, Release gives it back, and a lease never released (its holder
// crashed or hung) gives its slot back by itself after the maximum hold.
func ExampleEngine_Acquire() {
	clock := engine.NewFakeClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	e, _ := engine.New(memory.New(nil), &engine.Options{Clock: clock})
	defer e.Close()
	ctx := context.Background()
	inFlight := engine.Limit{
		Namespace: "in-flight",
		Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: 2, Window: 30 * time.Second}),
	}
	a, _ := e.Acquire(ctx, inFlight, "api-key-1")
	b, _ := e.Acquire(ctx, inFlight, "api-key-1")
	c, _ := e.Acquire(ctx, inFlight, "api-key-1")
	fmt.Println("a:", a.Decision.Allowed, "b:", b.Decision.Allowed, "c:", c.Decision.Allowed, "(c may retry within", c.Decision.RetryAfter, "at most)")

	freed, _ := a.Release(ctx) // a's response ended
	again, _ := a.Release(ctx) // a second release does nothing
	fmt.Println("a released:", freed, "again:", again)
	d, _ := e.Acquire(ctx, inFlight, "api-key-1")
	fmt.Println("d:", d.Decision.Allowed, "remaining", d.Decision.Remaining)

	clock.Advance(30 * time.Second) // b and d hung: their leases end
	late, _ := b.Release(ctx)
	f, _ := e.Acquire(ctx, inFlight, "api-key-1")
	fmt.Println("b's late release freed:", late, "f:", f.Decision.Allowed, "remaining", f.Decision.Remaining)
	// Output:
	// a: true b: true c: false (c may retry within 30s at most)
	// a released: true again: false
	// d: true remaining 0
	// b's late release freed: false f: true remaining 1
}
