package sluice_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// fixedLimit is an engine limit of a fixed window of n an hour.
func fixedLimit(name string, n int64) engine.Limit {
	return engine.Limit{Namespace: name, Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: n, Window: time.Hour})}
}

// A Partial batch, step by step: a soft request's denial leaves the others
// to be decided again without it, and they spend; a denial under a request
// not soft refuses the batch, and nothing is spent; a batch that is not
// Partial spends on all or none, soft or not.
func TestDeciderPartial(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t)
	c, err := sluice.NewDecider(sluice.DeciderConfig{Engine: e, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hard, soft, small := fixedLimit("hard", 3), fixedLimit("soft", 1), fixedLimit("small", 1)
	remaining := func(l engine.Limit) int64 {
		d, err := e.Peek(ctx, l, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			return d.Remaining + 1 // Remaining is after the cost peeked
		}
		return d.Remaining
	}
	for i, step := range []struct {
		limits  []engine.Limit
		soft    []bool
		partial bool
		over    bool
		allowed []bool
		spent   []bool
		left    [3]int64 // what hard, soft and small have after the step
	}{
		{[]engine.Limit{hard, soft}, []bool{false, true}, true, false, []bool{true, true}, []bool{true, true}, [3]int64{2, 0, 1}},
		// soft is spent: denied, it leaves hard to spend alone.
		{[]engine.Limit{soft, hard}, []bool{true, false}, true, false, []bool{false, true}, []bool{false, true}, [3]int64{1, 0, 1}},
		// Not Partial: soft's denial keeps hard from spending.
		{[]engine.Limit{soft, hard}, []bool{true, false}, false, false, []bool{false, true}, []bool{false, false}, [3]int64{1, 0, 1}},
		{[]engine.Limit{hard, small}, []bool{false, false}, true, false, []bool{true, true}, []bool{true, true}, [3]int64{0, 0, 0}},
		// small, not soft, denies: nothing is spent, soft or not.
		{[]engine.Limit{soft, small, hard}, []bool{true, false, false}, true, true, []bool{false, false, false}, []bool{false, false, false}, [3]int64{0, 0, 0}},
	} {
		reqs := make([]engine.Request, len(step.limits))
		names := make([]string, len(step.limits))
		for j, l := range step.limits {
			reqs[j], names[j] = engine.Request{Limit: l, Key: "k", Cost: 1}, l.Namespace
		}
		var scratch sluice.Scratch
		res, _, err := c.Decide(ctx, sluice.Batch{Names: names, Soft: step.soft, Partial: step.partial}, reqs, &scratch)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		var allowed, spent []bool
		for j, d := range res.Decisions {
			allowed, spent = append(allowed, d.Allowed), append(spent, res.Spent(j))
		}
		if res.Over != step.over || !slices.Equal(allowed, step.allowed) || !slices.Equal(spent, step.spent) {
			t.Errorf("step %d: over %v, allowed %v, spent %v; want %v, %v, %v", i, res.Over, allowed, spent, step.over, step.allowed, step.spent)
		}
		if got := [3]int64{remaining(hard), remaining(soft), remaining(small)}; got != step.left {
			t.Errorf("step %d: left %v, want %v", i, got, step.left)
		}
	}
}

// Pick chooses what the answer reports: when the request is refused, a
// refusing decision with the longest RetryAfter, the first of those; else
// the first with the least Remaining; never one it may not, and -1 only
// when there is none it may.
func TestPickProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 10).Draw(t, "n")
		ds := make([]algo.Decision, n)
		ok := make([]bool, n)
		for i := range ds {
			ds[i] = algo.Decision{
				Allowed:    rapid.Bool().Draw(t, "allowed"),
				Remaining:  rapid.Int64Range(0, 3).Draw(t, "remaining"),
				RetryAfter: time.Duration(rapid.Int64Range(0, 3).Draw(t, "retry")),
			}
			ok[i] = rapid.IntRange(0, 4).Draw(t, "ok") > 0
		}
		over := rapid.Bool().Draw(t, "over")
		p := sluice.Pick(n, over, func(i int) (algo.Decision, bool) { return ds[i], ok[i] })
		want := -1
		refused := func(i int) bool { return over && !ds[i].Allowed }
		for i := range n {
			switch {
			case !ok[i]:
			case want < 0:
				want = i
			case refused(i) != refused(want):
				if refused(i) {
					want = i
				}
			case refused(i):
				if ds[i].RetryAfter > ds[want].RetryAfter {
					want = i
				}
			case ds[i].Remaining < ds[want].Remaining:
				want = i
			}
		}
		// want is the model's: check it keeps the promise, then Pick.
		if want >= 0 {
			for i := range n {
				if !ok[i] {
					continue
				}
				if refused(i) && !refused(want) {
					t.Fatalf("model picked %d, not refusing, over %d refusing", want, i)
				}
				if refused(i) == refused(want) && refused(i) && (ds[i].RetryAfter > ds[want].RetryAfter || ds[i].RetryAfter == ds[want].RetryAfter && i < want) {
					t.Fatalf("model picked %d, %d waits longer or as long and comes first", want, i)
				}
			}
		}
		if p != want {
			t.Fatalf("Pick = %d, want %d (over %v, decisions %+v, ok %v)", p, want, over, ds, ok)
		}
	})
}
