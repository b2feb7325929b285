package engine_test

import (
	"context"
	"errors"
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
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// newSwapEngine returns an engine on clock over s.
func newSwapEngine(t testing.TB, s backend.Backend, clock engine.Clock, opts *engine.Options) *engine.Engine {
	t.Helper()
	o := engine.Options{Clock: clock, Stripes: 4}
	if opts != nil {
		o = *opts
		o.Clock = clock
	}
	e, err := engine.New(s, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestSwapCoalescesConcurrentCallers: with the clock frozen, 64 callers on
// one key over the compare-and-swap path admit exactly the capacity, and
// share compare-and-swaps: while the first caller's commit is held, the 63
// others queue on the key, and the next leader steps them all and commits
// them with one compare-and-swap. Each caller still gets its own decision.
func TestSwapCoalescesConcurrentCallers(t *testing.T) {
	const callers, capacity = 64, 10
	clock := engine.NewFakeClock(t0)
	hold := make(chan struct{})
	var holding atomic.Bool
	held := make(chan struct{})
	store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Before: func(_ *backendtest.SwapStore, swaps []backend.Swap) {
		if holding.CompareAndSwap(true, false) {
			close(held)
			<-hold
		}
	}})
	e := newSwapEngine(t, store, clock, nil)
	l := limit(algo.TokenBucketName, algo.Params{Limit: capacity, Window: time.Hour}, "x")
	if _, err := e.Apply(context.Background(), l, "warm-up", 1); err != nil { // learns the store's clock
		t.Fatal(err)
	}
	before := store.Calls()
	holding.Store(true)
	var admitted, decided atomic.Int64
	var wg sync.WaitGroup
	call := func() {
		defer wg.Done()
		d, err := e.Apply(context.Background(), l, "hot", 1)
		if err != nil {
			t.Error(err)
			return
		}
		decided.Add(1)
		if d.Allowed {
			admitted.Add(1)
		}
	}
	wg.Add(1)
	go call()
	<-held // the first caller's compare-and-swap is in the store
	for range callers - 1 {
		wg.Add(1)
		go call()
	}
	for engine.Queued(e, l, "hot") < callers-1 {
		runtime.Gosched()
	}
	close(hold)
	wg.Wait()
	if got := admitted.Load(); got != capacity {
		t.Fatalf("admitted %d of %d with the clock frozen, want the capacity %d", got, callers, capacity)
	}
	if got := decided.Load(); got != callers {
		t.Fatalf("%d decisions, want %d", got, callers)
	}
	if got := store.Calls() - before; got != 2 {
		t.Fatalf("%d compare-and-swaps for %d callers, want 2: the first caller's and one for the 63 queued behind it", got, callers)
	}
	if d, err := e.Peek(context.Background(), l, "hot", 1); err != nil || d.Allowed || d.Remaining != 0 {
		t.Fatalf("Peek after the crowd = %+v, %v; want denied, nothing remaining", d, err)
	}
}

// TestSwapTwoEnginesWithSkewedClocks: two engines whose local clocks are off
// by seconds (either way) from the store's share one in-process Swapper, and
// take turns at random with applies, peeks, ApplyAll, resets and clock
// steps. Every decision is the one a single engine on the store's clock
// makes for the same sequence: time comes from the store, and a stale
// last-seen record is corrected by the compare-and-swap. With
// ConfirmDenials every decision is the single engine's to the letter; by
// default, a denial answered from a stale last-seen record is still a
// denial, with a Remaining at least and a RetryAfter at most the single
// engine's (the stale record is less spent), and never turns an allow into
// a deny.
func TestSwapTwoEnginesWithSkewedClocks(t *testing.T) {
	t.Run("ConfirmDenials", func(t *testing.T) { testTwoEngines(t, true) })
	t.Run("LocalDenials", func(t *testing.T) { testTwoEngines(t, false) })
}

func testTwoEngines(t *testing.T, confirm bool) {
	rapid.Check(t, func(t *rapid.T) {
		limits := genLimits(t)
		storeClock := engine.NewFakeClock(t0)
		skews := []time.Duration{
			time.Duration(rapid.Int64Range(-5e9, 5e9).Draw(t, "skew A")),
			time.Duration(rapid.Int64Range(-5e9, 5e9).Draw(t, "skew B")),
		}
		store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: storeClock.Now})
		clocks := []*engine.FakeClock{engine.NewFakeClock(t0.Add(skews[0])), engine.NewFakeClock(t0.Add(skews[1]))}
		var fleet []*engine.Engine
		for i, c := range clocks {
			e, err := engine.New(store, &engine.Options{Clock: c, Stripes: 4, Swap: engine.SwapOptions{ConfirmDenials: confirm}})
			if err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				defer e.Close() // closes the shared store; the other engine is left to the collector
			}
			fleet = append(fleet, e)
		}
		one, err := engine.New(memory.New(&memory.Options{SweepInterval: -1, Shards: 4}), &engine.Options{Clock: storeClock, Stripes: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer one.Close()
		for i := range rapid.IntRange(1, 150).Draw(t, "ops") {
			e := fleet[rapid.IntRange(0, 1).Draw(t, "engine")]
			l := rapid.SampledFrom(limits).Draw(t, "limit")
			key := rapid.SampledFrom(propKeys).Draw(t, "key")
			cost := rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(t, "cost")
			var got, want string
			switch rapid.IntRange(0, 7).Draw(t, "op") {
			case 0:
				dt := genStep(t)
				storeClock.Advance(dt)
				for _, c := range clocks {
					c.Advance(dt)
				}
				continue
			case 1:
				got, want = fmt.Sprint(e.Reset(context.Background(), l, key)), fmt.Sprint(one.Reset(context.Background(), l, key))
			case 2:
				got, want = peekBoth(e, one, l, key, cost)
			case 3:
				reqs := []engine.Request{{Limit: l, Key: key, Cost: cost}, {Limit: rapid.SampledFrom(limits).Draw(t, "limit2"), Key: "c", Cost: 1}}
				d1, all1, err1 := e.ApplyAll(context.Background(), reqs)
				d2, all2, err2 := one.ApplyAll(context.Background(), reqs)
				if !confirm && err1 == nil && err2 == nil && !all1 && !all2 {
					// A denial answered from the last-seen records: each
					// denial as conservative as a single one may be, the
					// other requests' answers those of records as stale.
					stale := true
					for j := range d1 {
						if !d1[j].Allowed && !(!d2[j].Allowed && d1[j].Limit == d2[j].Limit && d1[j].Remaining >= d2[j].Remaining && d1[j].RetryAfter > 0 && d1[j].RetryAfter <= d2[j].RetryAfter) {
							stale = false
						}
					}
					if stale {
						d1 = d2
					}
				}
				got, want = fmt.Sprintf("%+v %v %v", d1, all1, err1), fmt.Sprintf("%+v %v %v", d2, all2, err2)
			default:
				d1, err1 := e.Apply(context.Background(), l, key, cost)
				d2, err2 := one.Apply(context.Background(), l, key, cost)
				if !confirm && err1 == nil && err2 == nil && !d1.Allowed && !d2.Allowed &&
					d1.Limit == d2.Limit && d1.Remaining >= d2.Remaining && d1.RetryAfter > 0 && d1.RetryAfter <= d2.RetryAfter {
					d1 = d2 // a denial from a stale last-seen record, as conservative as it may be
				}
				got, want = fmt.Sprintf("%+v %v", d1, err1), fmt.Sprintf("%+v %v", d2, err2)
			}
			if got != want {
				t.Fatalf("op %d: the fleet answered\n %s\none engine answers\n %s", i, got, want)
			}
		}
	})
}

// TestSwapConflictIsSteppedAgain: another process spends from the key
// between this engine's read and its commit (the store's hook runs a second
// engine's Apply there). The commit finds the record changed, steps again on
// it, and the two engines together admit exactly the capacity with the
// clock frozen.
func TestSwapConflictIsSteppedAgain(t *testing.T) {
	const capacity = 6
	clock := engine.NewFakeClock(t0)
	var other *engine.Engine
	var inHook atomic.Bool
	var otherAdmitted atomic.Int64
	l := limit(algo.GCRAName, algo.Params{Limit: capacity, Window: time.Hour}, "x")
	store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Before: func(_ *backendtest.SwapStore, swaps []backend.Swap) {
		if len(swaps) == 0 || other == nil || !inHook.CompareAndSwap(false, true) {
			return
		}
		defer inHook.Store(false)
		if d, err := other.Apply(context.Background(), l, "k", 1); err == nil && d.Allowed {
			otherAdmitted.Add(1)
		}
	}})
	e := newSwapEngine(t, store, clock, nil)
	o, err := engine.New(store, &engine.Options{Clock: clock, Stripes: 4})
	if err != nil {
		t.Fatal(err)
	}
	other = o
	var admitted int64
	for range 2 * capacity {
		d, err := e.Apply(context.Background(), l, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if got := admitted + otherAdmitted.Load(); got != capacity {
		t.Fatalf("the two engines admitted %d + %d with the clock frozen, want the capacity %d in all", admitted, otherAdmitted.Load(), capacity)
	}
	if otherAdmitted.Load() == 0 {
		t.Fatal("the other engine admitted nothing: no conflict was tested")
	}
	if c := e.Stats().Conflicts; c == 0 {
		t.Fatal("no conflict counted")
	}
}

// TestSwapRetriesAreBounded: a key that changes before every commit makes
// the decision fail, after exactly 1 + SwapOptions.Retries compare-and-swaps, with
// ErrStore wrapping ErrContention, never a silent pass; the next call, once
// the interference stops, works.
func TestSwapRetriesAreBounded(t *testing.T) {
	const retries = 3
	clock := engine.NewFakeClock(t0)
	var interfere atomic.Bool
	var n atomic.Int64
	store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Before: func(s *backendtest.SwapStore, swaps []backend.Swap) {
		if interfere.Load() && len(swaps) > 0 {
			s.Put(swaps[0].Key, []byte(fmt.Sprintf("someone else's %d", n.Add(1))), 0)
		}
	}})
	e := newSwapEngine(t, store, clock, &engine.Options{Swap: engine.SwapOptions{Retries: retries}})
	l := limit(algo.TokenBucketName, algo.Params{Limit: 5, Window: time.Minute}, "x")
	if _, err := e.Apply(context.Background(), l, "warm-up", 1); err != nil {
		t.Fatal(err)
	}
	interfere.Store(true)
	before := store.Calls()
	d, err := e.Apply(context.Background(), l, "k", 1)
	if !errors.Is(err, engine.ErrStore) || !errors.Is(err, engine.ErrContention) {
		t.Fatalf("Apply under endless conflict = %+v, %v; want ErrStore wrapping ErrContention", d, err)
	}
	if d != (algo.Decision{}) {
		t.Fatalf("a failed Apply answered %+v, want the zero Decision", d)
	}
	if got := store.Calls() - before; got != 1+retries {
		t.Fatalf("%d compare-and-swaps, want %d", got, 1+retries)
	}
	interfere.Store(false)
	if d, err := e.Apply(context.Background(), l, "k", 1); err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("Apply after the conflicts stop = %+v, %v; want allowed, 4 remaining (the junk record is treated as absent)", d, err)
	}
}

// TestSwapDenialAfterResetElsewhere: one engine spends a key to denial and
// then denies it locally; another engine resets it, and the store's
// watch of deletions tells the first, whose next request is allowed. A
// request the last-seen record allows but the store's record denies is
// denied with the store's Remaining and RetryAfter.
func TestSwapDenialAfterResetElsewhere(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now})
	a := newSwapEngine(t, store, clock, nil)
	b, err := engine.New(store, &engine.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	l := limit(algo.SlidingLogName, algo.Params{Limit: 2, Window: time.Minute}, "x")
	for range 2 {
		a.Apply(context.Background(), l, "k", 1)
	}
	if d, _ := a.Apply(context.Background(), l, "k", 1); d.Allowed {
		t.Fatal("third request of two allowed")
	}
	calls := store.Calls()
	if d, _ := a.Apply(context.Background(), l, "k", 1); d.Allowed || store.Calls() != calls || a.Stats().LocalDenials == 0 {
		t.Fatalf("a request on the denied key: %+v, %d compare-and-swaps, %+v; want a local denial", d, store.Calls()-calls, a.Stats())
	}
	if err := b.Reset(context.Background(), l, "k"); err != nil {
		t.Fatal(err)
	}
	if d, err := a.Apply(context.Background(), l, "k", 1); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after another process's Reset: %+v, %v; want allowed, 1 remaining", d, err)
	}
	// b spends the last unit at t0+10s; a's denial reports b's record.
	clock.Advance(10 * time.Second)
	if d, _ := b.Apply(context.Background(), l, "k", 1); !d.Allowed {
		t.Fatal("b's request refused")
	}
	d, err := a.Apply(context.Background(), l, "k", 1)
	if err != nil || d.Allowed || d.RetryAfter != 50*time.Second {
		t.Fatalf("a's denial = %+v, %v; want denied with RetryAfter 50s (the entry b spent at t0+10s stays a minute)", d, err)
	}
}

// TestSwapStoreErrors: over faulty's wrapper (which forwards Swapper), a
// failed compare-and-swap is an ErrStore wrapping the cause, the decision is
// zero, and the next call works; a store without a clock of its own leaves
// the engine on its local clock.
func TestSwapStoreErrors(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	b, f := faulty.Wrap(backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, NoClock: true}))
	if _, ok := b.(backend.Swapper); !ok {
		t.Fatal("faulty's wrapper hides backend.Swapper")
	}
	e := newSwapEngine(t, b, clock, nil)
	l := limit(algo.FixedWindowName, algo.Params{Limit: 3, Window: time.Minute}, "x")
	if _, err := e.Apply(context.Background(), l, "k", 1); err != nil {
		t.Fatal(err)
	}
	addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpCompareAndSwap}, Times: 1, Err: faulty.ErrInjected})
	d, err := e.Apply(context.Background(), l, "k", 1)
	if !errors.Is(err, engine.ErrStore) || !errors.Is(err, faulty.ErrInjected) || d != (algo.Decision{}) {
		t.Fatalf("Apply with a failing store = %+v, %v; want zero, ErrStore wrapping the cause", d, err)
	}
	if d, err := e.Apply(context.Background(), l, "k", 1); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("next Apply = %+v, %v; want allowed, 1 remaining", d, err)
	}
	if got := e.Stats().StoreErrors; got != 1 {
		t.Fatalf("StoreErrors = %d, want 1", got)
	}
	// The window is the local clock's: a minute on, it is full again.
	clock.Advance(time.Minute)
	if d, err := e.Apply(context.Background(), l, "k", 1); err != nil || d.Remaining != 2 {
		t.Fatalf("a window later: %+v, %v; want 2 remaining", d, err)
	}
}

// TestSwapCacheIsBounded: with room for one last-seen record, keys taken in
// turn always find another's record there; every decision still equals the
// memory store's, each miss costing one conflict (a second round trip).
func TestSwapCacheIsBounded(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	swap := newSwapEngine(t, openSwapStore(clock), clock, &engine.Options{Stripes: 1, Swap: engine.SwapOptions{CacheSize: 1}})
	mem := newEngine(t, memory.New(&memory.Options{SweepInterval: -1}), clock)
	l := limit(algo.SlidingCounterName, algo.Params{Limit: 4, Window: time.Second}, "x")
	for i := range 60 {
		key := fmt.Sprintf("k%d", i%5)
		d1, err1 := swap.Apply(context.Background(), l, key, 1)
		d2, err2 := mem.Apply(context.Background(), l, key, 1)
		if err1 != nil || err2 != nil || d1 != d2 {
			t.Fatalf("request %d on %s: %+v, %v over the swap path; %+v, %v over memory", i, key, d1, err1, d2, err2)
		}
		clock.Advance(100 * time.Millisecond)
	}
	if c := swap.Stats().Conflicts; c < 50 {
		t.Fatalf("%d conflicts in 60 requests over 5 keys with room for one record; want one per request after the first round", c)
	}
}

// TestSwapReckonsTheStoresTTLUnit: a store that keeps records for whole
// milliseconds (backend.TTLUnit, as Redis does) still holds a record of a
// 200µs window when the engine's own reckoning says it is gone; the engine
// rounds as the store does, so revisiting such a key never expects the
// wrong record: no conflict, every decision one engine on memory makes,
// whether the revisit comes before the store forgets the record or after.
func TestSwapReckonsTheStoresTTLUnit(t *testing.T) {
	for _, name := range algo.Names {
		t.Run(string(name), func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, TTLUnit: time.Millisecond})
			e := newSwapEngine(t, store, clock, nil)
			one := newSwapEngine(t, memory.New(&memory.Options{SweepInterval: -1}), clock, nil)
			l := limit(name, algo.Params{Limit: 3, Window: 200 * time.Microsecond}, "x")
			steps := []time.Duration{300 * time.Microsecond, 0, 700 * time.Microsecond, 1200 * time.Microsecond, 999 * time.Microsecond, 1}
			for i := range 60 {
				got, err1 := e.Apply(context.Background(), l, "k", 1)
				want, err2 := one.Apply(context.Background(), l, "k", 1)
				if err1 != nil || err2 != nil || got != want {
					t.Fatalf("decision %d: over the store %+v %v, one engine on memory %+v %v", i, got, err1, want, err2)
				}
				clock.Advance(steps[i%len(steps)])
			}
			if c := e.Stats().Conflicts; c != 0 {
				t.Errorf("%d conflicts with no other writer: the engine expected a record the store had forgotten, or none where it kept one", c)
			}
		})
	}
}

// TestSwapTTLUnitIsReckonedExactly: over a store that keeps records for
// whole milliseconds, with the clock running forwards, one engine's
// decisions are one engine's on memory, and it never expects a record
// the store has not got: no conflict, with no other writer. (With the
// clock stepping back, a record kept the extra fraction of a millisecond
// may come back where memory's would not; Redis does the same.)
func TestSwapTTLUnitIsReckonedExactly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limits := genLimits(t)
		clock := engine.NewFakeClock(t0)
		e, err := engine.New(backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, TTLUnit: time.Millisecond}), &engine.Options{Clock: clock, Stripes: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		one, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock, Stripes: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer one.Close()
		for i := range rapid.IntRange(1, 150).Draw(t, "ops") {
			l := rapid.SampledFrom(limits).Draw(t, "limit")
			key := rapid.SampledFrom(propKeys).Draw(t, "key")
			cost := rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(t, "cost")
			var got, want string
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0:
				clock.Advance(time.Duration(rapid.OneOf(
					rapid.Int64Range(1, 2e6), // within a millisecond or two: the unit's edge
					rapid.Int64Range(1, 3e9),
					rapid.SampledFrom([]int64{0, 1e6, 7e8, 1e9, 60e9}),
				).Draw(t, "step")))
				continue
			case 1:
				got, want = fmt.Sprint(e.Reset(context.Background(), l, key)), fmt.Sprint(one.Reset(context.Background(), l, key))
			case 2:
				got, want = peekBoth(e, one, l, key, cost)
			case 3:
				reqs := []engine.Request{{Limit: l, Key: key, Cost: cost}, {Limit: rapid.SampledFrom(limits).Draw(t, "limit2"), Key: rapid.SampledFrom(propKeys).Draw(t, "key2"), Cost: 1}}
				d1, all1, err1 := e.ApplyAll(context.Background(), reqs)
				d2, all2, err2 := one.ApplyAll(context.Background(), reqs)
				got, want = fmt.Sprintf("%+v %v %v", d1, all1, err1), fmt.Sprintf("%+v %v %v", d2, all2, err2)
			default:
				d1, err1 := e.Apply(context.Background(), l, key, cost)
				d2, err2 := one.Apply(context.Background(), l, key, cost)
				got, want = fmt.Sprintf("%+v %v", d1, err1), fmt.Sprintf("%+v %v", d2, err2)
			}
			if got != want {
				t.Fatalf("op %d: over the store\n %s\none engine on memory\n %s", i, got, want)
			}
			if c := e.Stats().Conflicts; c != 0 {
				t.Fatalf("op %d: %d conflicts with no other writer", i, c)
			}
		}
	})
}

// peekBoth returns what e and one answer a Peek, printed alike.
func peekBoth(e, one *engine.Engine, l engine.Limit, key string, cost int64) (got, want string) {
	d1, err1 := e.Peek(context.Background(), l, key, cost)
	d2, err2 := one.Peek(context.Background(), l, key, cost)
	return fmt.Sprintf("%+v %v", d1, err1), fmt.Sprintf("%+v %v", d2, err2)
}
