package algo

import (
	"time"

	"github.com/sluice-go/sluice/codec"
)

// SlidingLog keeps the time of every admitted unit of cost in the trailing
// window and admits a request while the window holds room for it. It is
// exact and costs O(limit) bytes per key, which makes it right for small
// limits on expensive actions (logins, password resets) and wrong for a
// public API at thousands of requests per key.
//
// Entry times are stored at a resolution of window/2^21 or finer, rounded
// up, so that each entry costs at most three bytes; an entry therefore ages
// out at most that much later than it would at nanosecond resolution, never
// earlier.
type SlidingLog struct {
	rate
	shift uint8 // codec.LogShift(window)
}

func newSlidingLog(r rate) *SlidingLog {
	return &SlidingLog{rate: r, shift: codec.LogShift(r.window)}
}

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
func (a *SlidingLog) StepInto(state []byte, now, cost int64, d *Decision) []byte {
	l, err := codec.DecodeLog(state)
	corrupt := err != nil && isCorrupt(state)
	horizon := satAdd(now, -a.window) // entries at or before it have aged out
	var (
		alive int64
		first int64 // oldest live entry
		it    codec.LogIter
	)
	if err == nil {
		it = l.Iter()
		for i := int64(0); ; i++ {
			t, ok := it.Next()
			if !ok {
				break
			}
			if t > horizon {
				first, alive = t, int64(l.Len)-i
				break
			}
		}
	}
	if !a.validCost(cost) || alive+cost > a.capacity {
		retry := a.window
		if a.validCost(cost) {
			// The request fits once the entry at this index has aged out.
			index := alive + cost - a.capacity - 1
			t := first
			for j := int64(0); j < index; j++ {
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
	switch {
	case alive == 0:
		w = codec.NewLogWriter(state, now, a.shift)
	case l.Shift == a.shift:
		rest := it.Rest()
		w = codec.NewLogWriter(state, first, a.shift)
		w.AddRaw(rest, l.Newest)
		w.Add(now)
	default: // the window changed: store the live entries at the new resolution
		w = codec.NewLogWriter(nil, first, a.shift)
		for t, ok := it.Next(); ok; t, ok = it.Next() {
			w.Add(t)
		}
		w.Add(now)
	}
	for i := int64(1); i < cost; i++ {
		w.Add(now)
	}
	ttl := until(satAdd(w.Last(), a.window), now)
	next := w.Bytes()
	d.Allowed = true
	d.Limit = a.capacity
	d.Remaining = a.capacity - alive - cost
	d.RetryAfter = 0
	d.Reset = time.Duration(ttl)
	d.Delay = 0
	d.TTL = time.Duration(ttl)
	d.CorruptState = corrupt
	return next
}
