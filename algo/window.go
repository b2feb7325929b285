package algo

import "github.com/sluice-go/sluice/codec"

// FixedWindow counts the cost admitted in each window, windows aligned to
// whole multiples of the window length from the Unix epoch. It is the
// cheapest algorithm and the leakiest: limit requests just before a boundary
// and limit more just after it all pass.
type FixedWindow struct{ rate }

// Name returns "fixed_window".
func (*FixedWindow) Name() Name { return FixedWindowName }

// Step answers one request; see Algorithm.
func (a *FixedWindow) Step(state []byte, now, cost int64) ([]byte, Decision) {
	var d Decision
	next := a.StepInto(state, now, cost, &d)
	return next, d
}

// StepInto is Step writing the decision to *d (every field) rather than
// returning it, so that a caller holding the concrete type keeps the
// decision in its own frame instead of copying it through the stack.
func (a *FixedWindow) StepInto(state []byte, now, cost int64, d *Decision) []byte {
	start := align(now, a.window)
	s, err := codec.DecodeWindow(state)
	corrupt := err != nil && isCorrupt(state)
	switch {
	case err != nil || s.Start < start:
		s = codec.Window{Start: start}
	case s.Start > start: // the clock stepped back: stay in the later window
		start = s.Start
	}
	end := until(satAdd(start, a.window), now)
	if !a.validCost(cost) || s.Count > a.capacity-cost { // not Count+cost: a stored count may be huge
		a.denyInto(d, corrupt, a.capacity-s.Count, end, end)
		return nil
	}
	s.Count += cost
	next := codec.AppendWindow(state, s)
	a.allowInto(d, corrupt, a.capacity-s.Count, end, 0)
	return next
}

// SlidingCounter estimates the cost admitted in the trailing window as this
// window's count plus the previous window's, weighted by the fraction of the
// previous window the trailing one still overlaps. Two counters per key and
// no boundary burst, at the price of assuming the previous window's requests
// were spread evenly across it.
type SlidingCounter struct{ rate }

// Name returns "sliding_counter".
func (*SlidingCounter) Name() Name { return SlidingCounterName }

// Step answers one request; see Algorithm.
func (a *SlidingCounter) Step(state []byte, now, cost int64) ([]byte, Decision) {
	var d Decision
	next := a.StepInto(state, now, cost, &d)
	return next, d
}

// StepInto is Step writing the decision to *d (every field) rather than
// returning it, so that a caller holding the concrete type keeps the
// decision in its own frame instead of copying it through the stack.
func (a *SlidingCounter) StepInto(state []byte, now, cost int64, d *Decision) []byte {
	w := a.window
	start := align(now, w)
	s, err := codec.DecodeCounter(state)
	corrupt := err != nil && isCorrupt(state)
	switch {
	case err != nil:
		s = codec.Counter{Start: start}
	case s.Start < start:
		carried := int64(0)
		if s.Start == start-w {
			carried = s.Count
		}
		s = codec.Counter{Start: start, Previous: carried}
	case s.Start > start: // the clock stepped back: stay in the later window
		start = s.Start
	}
	elapsed := until(now, start) // under w; zero when the clock stepped back
	// The estimate is previous·(w-elapsed)/w + count; compare everything
	// scaled by w so that the arithmetic stays exact.
	capW := mul128(uint64(a.capacity), uint64(w))
	usedW := mul128(uint64(s.Previous), uint64(w-elapsed)).add(mul128(uint64(s.Count), uint64(w)))
	costW := mul128(uint64(max(cost, 0)), uint64(w))
	if !a.validCost(cost) || capW.less(usedW.add(costW)) {
		a.denyInto(d, corrupt, floorRoom(capW, usedW, w), a.retryAfter(s, start, now, a.clampCost(cost)), a.reset(s, start, now))
		return nil
	}
	remaining := floorRoom(capW, usedW.add(costW), w)
	s.Count += cost
	reset := a.reset(s, start, now)
	next := codec.AppendCounter(state, s)
	a.allowInto(d, corrupt, remaining, reset, 0)
	return next
}

// retryAfter is the time until the same request, with nothing else in
// between, fits: the earliest instant at which the estimate plus cost is
// at most the capacity. Within this window the estimate falls as the
// previous window ages out; if it does not fall far enough before the
// window ends, the request is tried in the next one, where this window's
// count has become the previous one (and in the one after, where nothing
// is left, when even that does not fit). The article looks only at the
// current window, and so answers too early whenever this window's own
// count still blocks the request in the next one.
func (a *SlidingCounter) retryAfter(s codec.Counter, start, now, cost int64) int64 {
	w := a.window
	// In this window, with previous and count as they are.
	if e, ok := a.fits(s.Previous, a.capacity-s.Count-cost); ok {
		return until(satAdd(start, e), now)
	}
	// In the next: this window's count is the previous one.
	if e, ok := a.fits(s.Count, a.capacity-cost); ok {
		return until(satAdd(start, satAdd(w, e)), now)
	}
	return until(satAdd(start, 2*w), now)
}

// fits returns the smallest elapsed time e within a window (0 <= e < w) at
// which previous·(w-e)/w plus what the window holds leaves room for the
// request, where room is the capacity less the window's count and the
// request's cost; ok is false when no such e is in the window.
func (a *SlidingCounter) fits(previous, room int64) (e int64, ok bool) {
	w := a.window
	switch {
	case room < 0:
		return 0, false
	case previous <= 0:
		return 0, true
	}
	// previous·(w-e) <= room·w holds from e = w - floor(room·w/previous).
	f := mulDiv(uint64(room), uint64(w), uint64(previous))
	switch {
	case f >= uint64(w):
		return 0, true
	case f == 0:
		return 0, false // only once the previous window is gone: the next one
	}
	return w - int64(f), true
}

// reset is the time until the estimate falls to zero: the end of the next
// window while this one has a count, of this one while only the previous has.
func (a *SlidingCounter) reset(s codec.Counter, start, now int64) int64 {
	switch {
	case s.Count > 0:
		return until(satAdd(start, 2*a.window), now)
	case s.Previous > 0:
		return until(satAdd(start, a.window), now)
	}
	return 0
}
