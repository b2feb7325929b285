package algo

import (
	"math"

	"github.com/sluice-go/sluice/codec"
)

// SlidingLog keeps the time of every admitted unit of cost in the trailing
// window and admits a request while the window holds room for it. It is
// exact and costs O(limit) bytes per key, which makes it right for small
// limits on expensive actions (logins, password resets) and wrong for a
// public API at thousands of requests per key.
//
// Entry times are kept to the nanosecond, so an entry ages out exactly one
// window after it was made, as in the reference design: a request arriving
// exactly then finds its room. The record (codec's version 4) keeps them as
// offsets of one width from a base, so that a step reads any entry directly
// and checks them all in a loop that does not wait on itself; a record of an
// earlier layout is read as it stands (the first layout's
// entries, rounded up to window/2^21, at the times it stored, which are
// never earlier than the real ones) and rewritten in the current one by the
// next admission.
type SlidingLog struct{ rate }

// Name returns "sliding_log".
func (*SlidingLog) Name() Name { return SlidingLogName }

// Step answers one request; see Algorithm.
func (a *SlidingLog) Step(state []byte, now, cost int64) ([]byte, Decision) {
	var d Decision
	next := a.StepInto(state, now, cost, &d)
	return next, d
}

// StepInto is Step writing the decision to *d (every field) rather than
// returning it, so that a caller holding the concrete type keeps the
// decision in its own frame instead of copying it through the stack.
//
// It walks the record once: codec's AddLog validates it, counts the
// entries that have aged out and, when the request fits beside the live
// ones, moves them up in one copy and adds its own; a denial then reads
// the one entry whose ageing out makes room.
func (a *SlidingLog) StepInto(state []byte, now, cost int64, d *Decision) []byte {
	// Entries at or before the horizon have aged out.
	horizon := now - a.window
	if now < math.MinInt64+a.window {
		horizon = math.MinInt64
	}
	// The request is admitted when cost is in 1..capacity and fits beside
	// the live entries, which AddLog checks.
	l, aged, live, t, res := codec.AddLog(state, horizon, a.capacity, cost, now)
	alive := int64(live)
	switch res {
	case codec.LogAdded:
		a.allowInto(d, false, a.capacity-alive-cost, until(later(t, a.window), now), 0)
		return l.Bytes()
	case codec.LogFull:
		retry := a.window
		if a.validCost(cost) {
			// The request fits once the entry at this index (among the
			// live ones) has aged out.
			retry = until(later(l.At(aged+int(alive+cost-a.capacity-1)), a.window), now)
		}
		reset := int64(0)
		if alive > 0 {
			reset = until(later(t, a.window), now)
		}
		// What is left now, as every algorithm reports on a denial.
		a.denyInto(d, false, a.capacity-alive, retry, reset)
		return nil
	case codec.LogRebase:
		// The base moves, or the array grows: Rewrite writes the record
		// anew. Entries never go backwards: a clock behind the newest
		// live entry adds at its time, which is t.
		r, _, _ := codec.ReadLogTable(state, horizon)
		next := r.Rewrite(state, aged, int(cost), t)
		a.allowInto(d, false, a.capacity-alive-cost, until(later(t, a.window), now), 0)
		return next
	}
	return a.stepOther(state, horizon, now, cost, d)
}

// later returns t+window for a window of at least 0, saturating rather
// than wrapping (only a record holding nonsense times gets there).
func later(t, window int64) int64 {
	if t > math.MaxInt64-window {
		return math.MaxInt64
	}
	return t + window
}

// stepOther is StepInto for a record that is not a version 4 log: none, a
// log of an earlier layout (read as it stands, and rewritten in the current
// one by an admission), or anything else, which is absent and, unless it is
// another algorithm's valid record, corrupt.
func (a *SlidingLog) stepOther(state []byte, horizon, now, cost int64, d *Decision) []byte {
	corrupt := false
	l, err := codec.SplitLog(state, horizon)
	if err != nil && len(state) != 0 {
		// A record of the first layout is read through the second's;
		// anything else that does not split is absent.
		if migrated, merr := codec.MigrateLog(state); merr == nil {
			l, err = codec.SplitLog(migrated, horizon)
		} else {
			corrupt = isCorrupt(state)
		}
	}
	if err != nil {
		l = codec.LogSplit{}
	}
	alive := int64(l.Live)
	if !a.validCost(cost) || alive+cost > a.capacity {
		retry := a.window
		if a.validCost(cost) {
			it := l.Iter()
			t, _ := it.Next()
			for range alive + cost - a.capacity - 1 {
				t, _ = it.Next()
			}
			retry = until(satAdd(t, a.window), now)
		}
		reset := int64(0)
		if alive > 0 {
			reset = until(satAdd(l.Newest, a.window), now)
		}
		a.denyInto(d, corrupt, a.capacity-alive, retry, reset)
		return nil
	}
	t := now
	if alive > 0 {
		t = max(now, l.Newest)
	}
	var next []byte
	if alive == 0 {
		next = codec.NewLogTable(state, int(cost), t)
	} else {
		// The live entries of the old layout, then the request's, in the
		// current layout (in state's array when it has room: the entries
		// are read out first). This happens once per key.
		times := make([]int64, 0, alive+cost)
		for it, i := l.Iter(), int64(0); i < alive; i++ {
			v, _ := it.Next()
			times = append(times, v)
		}
		for range cost {
			times = append(times, t)
		}
		next = codec.AppendLogTable(state, times)
	}
	a.allowInto(d, corrupt, a.capacity-alive-cost, until(satAdd(t, a.window), now), 0)
	return next
}
