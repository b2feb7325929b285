package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// byFirstByte puts keys in groups by the caller key's first byte, as a
// Redis Cluster puts them in slots by hash tag.
func byFirstByte(k []byte) string {
	_, key, _ := engine.SplitKey(k)
	return key[:1]
}

// TestSwapApplyAllOverGroups: over a store whose keys fall in several
// groups, ApplyAll commits group by group (the store refuses a swap over
// several) and answers as the striped path over memory does: all allowed,
// or, when a group denies, nothing spent in any, and every request's
// decision what it would have answered, whichever group denied.
func TestSwapApplyAllOverGroups(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Group: byFirstByte})
	swap := newSwapEngine(t, store, clock, nil)
	mem := newEngine(t, memory.New(&memory.Options{SweepInterval: -1}), clock)
	l := limit(algo.FixedWindowName, algo.Params{Limit: 5, Window: time.Minute}, "x")
	one := limit(algo.TokenBucketName, algo.Params{Limit: 1, Window: time.Hour}, "y")
	for _, reqs := range [][]engine.Request{
		// The denying group is the second of three.
		{{Limit: l, Key: "a1", Cost: 1}, {Limit: one, Key: "c1", Cost: 1}, {Limit: l, Key: "b1", Cost: 1}, {Limit: l, Key: "a2", Cost: 1}},
		// The denying group is the last.
		{{Limit: l, Key: "a1", Cost: 1}, {Limit: l, Key: "b1", Cost: 1}, {Limit: one, Key: "c1", Cost: 1}},
	} {
		for round := range 3 {
			got, all, err := swap.ApplyAll(context.Background(), reqs)
			want, wantAll, werr := mem.ApplyAll(context.Background(), reqs)
			if err != nil || werr != nil {
				t.Fatalf("round %d: ApplyAll = %v over the swap store, %v over memory", round, err, werr)
			}
			if all != wantAll || len(got) != len(want) {
				t.Fatalf("round %d: all = %v over the swap store, %v over memory", round, all, wantAll)
			}
			for j := range got {
				if got[j] != want[j] {
					t.Fatalf("round %d, request %d (%s): %+v over the swap store, %+v over memory", round, j, reqs[j].Key, got[j], want[j])
				}
			}
			if wantAll != (round == 0 && reqs[1].Limit == one) && wantAll != (round == 0) {
				t.Fatalf("round %d: all = %v", round, wantAll)
			}
			clock.Advance(time.Second)
		}
	}
	for _, key := range []string{"a1", "b1", "a2"} {
		got, _ := swap.Peek(context.Background(), l, key, 1)
		want, _ := mem.Peek(context.Background(), l, key, 1)
		if got != want {
			t.Errorf("%s after the denied calls: %+v over the swap store, %+v over memory", key, got, want)
		}
	}
}

// TestSwapApplyAllNamesTheFailedGroup: when the compare-and-swap of one
// group fails, ApplyAll's error is a *RequestError naming that group's
// first request, and a store error; over keys of one group the error
// concerns every request, and is a plain store error.
func TestSwapApplyAllNamesTheFailedGroup(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	b, f := faulty.Wrap(backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Group: byFirstByte}))
	e := newSwapEngine(t, b, clock, nil)
	l := limit(algo.FixedWindowName, algo.Params{Limit: 100, Window: time.Minute}, "x")
	reqs := []engine.Request{{Limit: l, Key: "a1", Cost: 1}, {Limit: l, Key: "b1", Cost: 1}, {Limit: l, Key: "a2", Cost: 1}, {Limit: l, Key: "b2", Cost: 1}}
	if _, all, err := e.ApplyAll(context.Background(), reqs); err != nil || !all {
		t.Fatalf("ApplyAll with the store up = %v, %v", all, err)
	}
	failing := func(group string) faulty.ID {
		return addRule(t, f, faulty.Rule{
			Ops:   []faulty.Op{faulty.OpCompareAndSwap},
			Match: func(c faulty.Call) bool { return len(c.Swaps) > 0 && byFirstByte(c.Swaps[0].Key) == group },
			Err:   faulty.ErrInjected,
		})
	}
	for _, c := range []struct {
		group string
		first int
	}{{"a", 0}, {"b", 1}} {
		id := failing(c.group)
		_, _, err := e.ApplyAll(context.Background(), reqs)
		f.Remove(id)
		var re *engine.RequestError
		if !errors.As(err, &re) || re.Request != c.first || !errors.Is(err, engine.ErrStore) || !errors.Is(err, faulty.ErrInjected) {
			t.Fatalf("group %s failing: ApplyAll = %v; want a RequestError of request %d, a store error", c.group, err, c.first)
		}
	}
	id := failing("a")
	_, _, err := e.ApplyAll(context.Background(), reqs[:1:1])
	_, _, err2 := e.ApplyAll(context.Background(), []engine.Request{reqs[0], reqs[2]})
	f.Remove(id)
	var re *engine.RequestError
	for _, err := range []error{err, err2} {
		if !errors.Is(err, engine.ErrStore) || errors.As(err, &re) {
			t.Fatalf("keys of one group failing: ApplyAll = %v; want a store error that names no request", err)
		}
	}
}

// TestSwapApplyAllLocalDenialAfterASpend: a process whose last-seen record
// is stale (another process spent since) asks for the same key twice in
// one ApplyAll. On the stale record the first request passes and the
// second is refused; on the store's record the first is refused and the
// second passes. The call is a denial either way, but which request the
// denial blames is the store's to say: the answer is the one a single
// engine gives, not one stepped on the stale record.
func TestSwapApplyAllLocalDenialAfterASpend(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now})
	a := newSwapEngine(t, store, clock, nil)
	b, err := engine.New(store, &engine.Options{Clock: clock, Stripes: 4})
	if err != nil {
		t.Fatal(err)
	}
	one := newEngine(t, memory.New(&memory.Options{SweepInterval: -1}), clock)
	l := limit(algo.FixedWindowName, algo.Params{Limit: 5, Window: time.Millisecond}, "x")
	for _, step := range []struct {
		e    *engine.Engine
		cost int64
	}{{a, 2}, {b, 1}} {
		if d, err := step.e.Apply(context.Background(), l, "c", step.cost); err != nil || !d.Allowed {
			t.Fatalf("Apply(cost %d) = %+v, %v", step.cost, d, err)
		}
		if d, err := one.Apply(context.Background(), l, "c", step.cost); err != nil || !d.Allowed {
			t.Fatalf("one engine: Apply(cost %d) = %+v, %v", step.cost, d, err)
		}
	}
	reqs := []engine.Request{{Limit: l, Key: "c", Cost: 3}, {Limit: l, Key: "c", Cost: 1}}
	got, all, err := a.ApplyAll(context.Background(), reqs)
	want, wantAll, werr := one.ApplyAll(context.Background(), reqs)
	if err != nil || werr != nil || all || wantAll {
		t.Fatalf("ApplyAll = %v, %v; one engine %v, %v; want both denied", all, err, wantAll, werr)
	}
	for j := range want {
		if got[j] != want[j] {
			t.Errorf("request %d (cost %d): %+v, one engine %+v", j, reqs[j].Cost, got[j], want[j])
		}
	}
}
