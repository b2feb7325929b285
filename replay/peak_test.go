package replay

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
)

// admitsAll reports whether the algorithm, with the rule's parameters but
// the given limit (a burst scaled with it), admits every request of the
// trace (pairs of time and cost).
func admitsAll(name algo.Name, p algo.Params, limit int64, trace []int64) bool {
	q := p
	q.Limit = limit
	if p.Burst > 0 {
		q.Burst = mulDivCeil(p.Burst, limit, p.Limit)
	}
	a, err := algo.New(name, q)
	if err != nil {
		return false
	}
	var state []byte
	for i := 0; i < len(trace); i += 2 {
		next, d := a.Step(state, trace[i], trace[i+1])
		if !d.Allowed {
			return false
		}
		if next != nil {
			state = next
		}
	}
	return true
}

// A caller's need is the least limit under which the algorithm itself,
// stepped through the caller's requests, denies none of them: the closed
// forms of the window algorithms and the bisection of the buckets agree
// with the algorithms at every limit, near window boundaries and with
// costs above one.
func TestNeedIsTheLeastLimitThatAdmitsAll(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.SampledFrom(algo.Names).Draw(t, "algorithm")
		window := rapid.SampledFrom([]time.Duration{time.Second, 3 * time.Second, time.Minute}).Draw(t, "window")
		p := algo.Params{Limit: int64(rapid.IntRange(1, 20).Draw(t, "limit")), Window: window}
		if kindFor(name) == kindBucket && rapid.Bool().Draw(t, "burst?") {
			p.Burst = int64(rapid.IntRange(1, 40).Draw(t, "burst"))
		}
		n := rapid.IntRange(1, 40).Draw(t, "n")
		at := int64(1_796_040_000) * 1e9
		var trace []int64
		var tr needTracker
		kind := kindFor(name)
		for range n {
			// Gaps around the window's edges: exactly on them, just before,
			// just after.
			gap := rapid.SampledFrom([]int64{0, 1, int64(window) / 7, int64(window) - 1, int64(window), int64(window) + 1, int64(window) / 2}).Draw(t, "gap")
			at += gap
			cost := int64(rapid.IntRange(1, 3).Draw(t, "cost"))
			trace = append(trace, at, cost)
			tr.add(kind, int64(window), at, cost)
		}
		need := tr.finish(name, p)
		if need == Unbounded {
			t.Fatalf("need unbounded for a small trace")
		}
		if !admitsAll(name, p, need, trace) {
			t.Fatalf("%s: need %d, but the algorithm at limit %d denies a request", name, need, need)
		}
		for l := int64(1); l < need; l++ {
			if admitsAll(name, p, l, trace) {
				t.Fatalf("%s: need %d, but limit %d admits every request", name, need, l)
			}
		}
	})
}

// The ceil(q·n)-th smallest need is the smallest limit leaving a share q
// of the callers never denied, and the covered share counts needs at most
// the limit.
func TestSuggestedLimit(t *testing.T) {
	cases := []struct {
		needs   []int64
		share   float64
		limit   int64
		want    int64
		covered float64
	}{
		{[]int64{5, 1, 3, 2, 4}, 0.99, 3, 5, 0.6},
		{[]int64{5, 1, 3, 2, 4}, 0.8, 3, 4, 0.6},
		{[]int64{5, 1, 3, 2, 4}, 0.6, 3, 3, 0.6},
		{[]int64{7}, 0.5, 10, 7, 1},
		{[]int64{2, 2, 2, 9}, 0.75, 1, 2, 0},
		{[]int64{2, Unbounded, 3, Unbounded}, 0.5, 3, 3, 0.5},
		{[]int64{2, Unbounded, 3, Unbounded}, 0.75, 3, Unbounded, 0.5},
	}
	for i, c := range cases {
		got := suggest(c.needs, c.share, c.limit)
		if got.limit != c.want || got.covered != c.covered {
			t.Errorf("case %d: suggested %d covering %v, want %d covering %v", i, got.limit, got.covered, c.want, c.covered)
		}
	}
}
