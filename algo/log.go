package algo

import (
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
// exactly then finds its room. A record of the first layout, whose entries
// were rounded up to window/2^21, is carried over at the times it stored,
// which are never earlier than the real ones.
type SlidingLog struct{ rate }

// Name returns "sliding_log".
func (*SlidingLog) Name() string { return SlidingLogName }

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
// It walks the record once: codec.SplitLog validates it, counts the live
// entries and finds the oldest of them in the same pass. Only a denial
// walks the live entries again, as far as the one whose ageing out makes
// room.
func (a *SlidingLog) StepInto(state []byte, now, cost int64, d *Decision) []byte {
	horizon := satAdd(now, -a.window) // entries at or before it have aged out
	l, err := codec.SplitLog(state, horizon)
	corrupt := false
	if err != nil && len(state) != 0 {
		// A record of the first layout is rewritten once, in a new array;
		// anything else that does not split is absent.
		if migrated, merr := codec.MigrateLog(state); merr == nil {
			state = migrated
			l, err = codec.SplitLog(state, horizon)
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
			// The request fits once the entry at this index (among the
			// live ones) has aged out.
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
		a.denyInto(d, corrupt, 0, retry, reset)
		return nil
	}
	var w codec.LogWriter
	if alive == 0 {
		w = codec.NewLogWriter(state, now)
	} else {
		// The live entries keep their encoding; they move to follow the
		// new header in the same array (a forward copy: Rest lies after it).
		w = codec.NewLogWriter(state, l.First)
		w.AddRaw(l.Rest, l.Newest)
		w.Add(now)
	}
	for range cost - 1 {
		w.Add(now)
	}
	ttl := until(satAdd(w.Last(), a.window), now)
	a.allowInto(d, corrupt, a.capacity-alive-cost, ttl, 0)
	return w.Bytes()
}
