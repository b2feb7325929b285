package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// TestSwapGroupCommitIsSequential: ApplyAll calls that queue for a shared
// key while another call holds it are decided together, in one
// compare-and-swap, by the first of them to own it, and each answers what
// it would have answered alone, in the order the calls came: the answers of
// a single engine over memory deciding the same calls one after another.
// The keys a denied call stepped are kept as that engine keeps them, under
// two rules per key as a reload that lowers a limit leaves them, which the
// decisions after the clock moves check.
func TestSwapGroupCommitIsSequential(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limits := genChangingLimits(t) // two rules per algorithm, as a reload that changes a limit makes them
		half := len(limits) / 2
		clock := engine.NewFakeClock(t0)
		var hold atomic.Bool
		entered, release := make(chan struct{}, 1), make(chan struct{})
		store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Before: func(_ *backendtest.SwapStore, swaps []backend.Swap) {
			if len(swaps) > 0 && hold.CompareAndSwap(true, false) {
				entered <- struct{}{}
				<-release
			}
		}})
		e, err := engine.New(store, &engine.Options{Clock: clock, Stripes: 4, Swap: engine.SwapOptions{ConfirmDenials: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		one, err := engine.New(memory.New(&memory.Options{SweepInterval: -1, Shards: 4}), &engine.Options{Clock: clock, Stripes: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer one.Close()

		// Every call names the tenant first; its namespace sorts before
		// the users', so each call waits for the tenant's key owning
		// nothing else, and the calls queue in the order they come.
		ta := rapid.IntRange(0, half-1).Draw(t, "tenant algorithm")
		tenants := []engine.Limit{{Namespace: "a", Algorithm: limits[ta].Algorithm}, {Namespace: "a", Algorithm: limits[ta+half].Algorithm}}
		tenant := tenants[0]
		users := []string{"u1", "u2", "u3"}
		userLimit := func(i, version int) engine.Limit {
			return engine.Limit{Namespace: "b", Algorithm: limits[i%half+version*half].Algorithm}
		}
		genCall := func(label string) []engine.Request {
			tl := tenants[rapid.IntRange(0, 1).Draw(t, label+" tenant rule")]
			reqs := []engine.Request{{Limit: tl, Key: "t", Cost: rapid.Int64Range(1, tl.Algorithm.Params().Capacity()).Draw(t, label+" tenant cost")}}
			for range rapid.IntRange(0, 2).Draw(t, label+" users") {
				i := rapid.IntRange(0, len(users)-1).Draw(t, label+" user")
				l := userLimit(i, rapid.IntRange(0, 1).Draw(t, label+" user rule"))
				reqs = append(reqs, engine.Request{Limit: l, Key: users[i], Cost: rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(t, label+" user cost")})
			}
			return reqs
		}
		compare := func(what string, reqs []engine.Request, got []algo.Decision, all bool, err error) {
			want, wantAll, werr := one.ApplyAll(context.Background(), reqs)
			if fmt.Sprint(got, all, err) != fmt.Sprint(want, wantAll, werr) {
				t.Fatalf("%s %v:\n the group answered %+v %v %v\n one engine answers %+v %v %v", what, reqs, got, all, err, want, wantAll, werr)
			}
		}
		for i := range rapid.IntRange(0, 3).Draw(t, "warm-up calls") {
			reqs := genCall("warm-up")
			got, all, err := e.ApplyAll(context.Background(), reqs)
			compare(fmt.Sprintf("warm-up %d", i), reqs, got, all, err)
		}

		// The first call holds the tenant's key in its compare-and-swap
		// while the others queue behind it.
		calls := [][]engine.Request{genCall("first")}
		n := rapid.IntRange(1, 8).Draw(t, "queued calls")
		for range n {
			calls = append(calls, genCall("queued"))
		}
		type answer struct {
			d   []algo.Decision
			all bool
			err error
		}
		answers := make([]answer, len(calls))
		if _, err := e.Peek(context.Background(), tenant, "t", 1); err != nil { // the store's clock learned before counting
			t.Fatal(err)
		}
		before := store.Calls()
		hold.Store(true)
		var wg sync.WaitGroup
		wg.Go(func() { answers[0].d, answers[0].all, answers[0].err = e.ApplyAll(context.Background(), calls[0]) })
		<-entered
		for i := 1; i <= n; i++ {
			wg.Go(func() { answers[i].d, answers[i].all, answers[i].err = e.ApplyAll(context.Background(), calls[i]) })
			for engine.Queued(e, tenant, "t") < i {
				runtime.Gosched()
			}
		}
		close(release)
		wg.Wait()
		for i, a := range answers {
			compare(fmt.Sprintf("call %d of %d", i, len(calls)), calls[i], a.d, a.all, a.err)
		}
		// One compare-and-swap for the first call, then one for each run
		// of queued calls alike: single-key calls coalesce as one batch,
		// and calls over several keys as one group.
		want := 1
		for i := 1; i <= n; i++ {
			if i == 1 || (len(calls[i]) > 1) != (len(calls[i-1]) > 1) {
				want++
			}
		}
		if got := store.Calls() - before; got != want {
			t.Fatalf("%d compare-and-swaps for the first call and %d queued behind it, want %d: one for the first, one for each run of single-key and of multi-key calls", got, n, want)
		}
		// What the calls kept and spent, seen as time passes.
		for i := range rapid.IntRange(1, 6).Draw(t, "checks") {
			clock.Advance(genStep(t))
			reqs := genCall("check")
			got, all, err := e.ApplyAll(context.Background(), reqs)
			compare(fmt.Sprintf("check %d", i), reqs, got, all, err)
		}
	})
}

// TestSwapGroupCommitUnderLoad: 64 goroutines, each a user, call ApplyAll
// on their own limit and a shared tenant's, over a compare-and-swap store
// that takes a while to answer, so that calls queue on the tenant's key;
// half the users' keys sort before the tenant's and half after, so some
// calls wait owning a key and others not. With the clock frozen the
// tenant admits exactly its capacity and no user more than its own; the
// process never conflicts with itself; and the queued calls are decided in
// groups, far fewer compare-and-swaps than calls.
func TestSwapGroupCommitUnderLoad(t *testing.T) {
	const (
		callers, each = 64, 5
		perUser       = 3
		capacity      = 100
	)
	clock := engine.NewFakeClock(t0)
	store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Before: func(_ *backendtest.SwapStore, swaps []backend.Swap) {
		if len(swaps) > 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}})
	e := newSwapEngine(t, store, clock, nil)
	tenant := limit(algo.TokenBucketName, algo.Params{Limit: capacity, Window: time.Hour}, "m")
	before := limit(algo.GCRAName, algo.Params{Limit: perUser, Window: time.Hour}, "a")
	after := limit(algo.SlidingLogName, algo.Params{Limit: perUser, Window: time.Hour}, "z")
	admitted := make([]int, callers)
	var wg sync.WaitGroup
	var errs atomic.Int64
	for i := range callers {
		user := before
		if i%2 == 1 {
			user = after
		}
		reqs := []engine.Request{{Limit: user, Key: fmt.Sprint("u", i), Cost: 1}, {Limit: tenant, Key: "t", Cost: 1}}
		wg.Go(func() {
			for range each {
				_, all, err := e.ApplyAll(context.Background(), reqs)
				if err != nil {
					errs.Add(1)
				} else if all {
					admitted[i]++
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for i, n := range admitted {
		if n > perUser {
			t.Errorf("user %d admitted %d times, its limit is %d", i, n, perUser)
		}
		total += n
	}
	st := e.Stats()
	t.Logf("%d calls: %d compare-and-swaps, %d conflicts, %d admitted", callers*each, store.Calls(), st.Conflicts, total)
	if errs.Load() != 0 || total != capacity {
		t.Fatalf("%d errors, %d admitted; want none, and exactly the tenant's %d", errs.Load(), total, capacity)
	}
	if st.Conflicts != 0 {
		t.Fatalf("%d conflicts within one process", st.Conflicts)
	}
	if calls := store.Calls(); calls*4 > callers*each {
		t.Fatalf("%d compare-and-swaps for %d calls queued on one key, want at most a quarter", calls, callers*each)
	}
}
