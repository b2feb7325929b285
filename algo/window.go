package algo

import "github.com/sluice-go/sluice/codec"

// FixedWindow counts the cost admitted in each window, windows aligned to
// whole multiples of the window length from the Unix epoch, or to a
// calendar (Params.Calendar). It is the cheapest algorithm and the
// leakiest: limit requests just before a boundary and limit more just
// after it all pass.
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
	var start, end int64
	if a.cal == nil {
		start = align(now, a.window)
		end = satAdd(start, a.window)
	} else {
		start, end = a.cal.bounds(now)
	}
	s, err := codec.DecodeWindow(state)
	corrupt := err != nil && isCorrupt(state)
	if err == nil && s.Start != start && a.foreign(s.Start) {
		// Written under another calendar: what it holds is carried in.
		s = codec.Window{Start: start, Count: a.carry(s.Start, s.Count, now, start, end)}
	}
	switch {
	case err != nil || s.Start < start:
		s = codec.Window{Start: start}
	case s.Start > start: // the clock stepped back: stay in the later window
		start = s.Start
		end = a.endOf(start)
	}
	left := until(end, now)
	if !a.validCost(cost) || s.Count > a.capacity-cost { // not Count+cost: a stored count may be huge
		a.denyInto(d, corrupt, a.capacity-s.Count, left, left)
		return nil
	}
	s.Count += cost
	next := codec.AppendWindow(state, s)
	a.allowInto(d, corrupt, a.capacity-s.Count, left, 0)
	return next
}

// SlidingCounter estimates the cost admitted in the trailing window as this
// window's count plus the previous window's, weighted by the fraction of the
// previous window the trailing one still overlaps. Two counters per key and
// no boundary burst, at the price of assuming the previous window's requests
// were spread evenly across it.
//
// Windows that follow a calendar (Params.Calendar) vary in length. The
// trailing window is then as long as the current one, L, ending now, and
// the previous window, of length Lp, weighs by the part of it the trailing
// window still overlaps: elapsed time e into the current window, the
// estimate is previous·min(Lp, L-e)/Lp + count. With windows of one length
// that is the usual previous·(L-e)/L + count; a 31-day month after a
// 30-day one weighs the previous month whole for its first day.
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
	var sp windowSpan
	if a.cal == nil { // rate.span, written out: a call here costs the common path
		start := align(now, a.window)
		end := satAdd(start, a.window)
		sp = windowSpan{prev: start - a.window, start: start, end: end, next: satAdd(end, a.window)}
	} else {
		sp = a.cal.span(now)
	}
	s, err := codec.DecodeCounter(state)
	corrupt := err != nil && isCorrupt(state)
	if err == nil && s.Start != sp.start && sp.prev < sp.start && a.foreign(s.Start) {
		// Written under another calendar: what it holds is carried in
		// (not at the far end of time, where the windows saturate).
		s = a.carryCounter(s, now, sp)
	}
	switch {
	case err != nil:
		s = codec.Counter{Start: sp.start}
	case s.Start < sp.start:
		carried := int64(0)
		if s.Start == sp.prev {
			carried = s.Count
		}
		s = codec.Counter{Start: sp.start, Previous: carried}
	case s.Start > sp.start: // the clock stepped back: stay in the later window
		sp = a.spanFrom(s.Start)
	}
	// The estimate is previous·min(lp, l-elapsed)/lp + count; compare
	// everything scaled by lp so that the arithmetic stays exact.
	l, lp := sp.end-sp.start, sp.start-sp.prev
	elapsed := until(now, sp.start) // under l; zero when the clock stepped back
	capW := mul128(uint64(a.capacity), uint64(lp))
	usedW := mul128(uint64(s.Previous), uint64(min(lp, l-elapsed))).add(mul128(uint64(s.Count), uint64(lp)))
	costW := mul128(uint64(max(cost, 0)), uint64(lp))
	if !a.validCost(cost) || capW.less(usedW.add(costW)) {
		a.denyInto(d, corrupt, floorRoom(capW, usedW, lp), a.retryAfter(s, sp, now, a.clampCost(cost)), a.reset(s, sp, now))
		return nil
	}
	remaining := floorRoom(capW, usedW.add(costW), lp)
	s.Count += cost
	reset := a.reset(s, sp, now)
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
func (a *SlidingCounter) retryAfter(s codec.Counter, sp windowSpan, now, cost int64) int64 {
	l := sp.end - sp.start
	// In this window, with previous and count as they are.
	if e, ok := fits(s.Previous, a.capacity-s.Count-cost, l, sp.start-sp.prev); ok {
		return until(satAdd(sp.start, e), now)
	}
	// In the next: this window's count is the previous one.
	if e, ok := fits(s.Count, a.capacity-cost, sp.next-sp.end, l); ok {
		return until(satAdd(sp.end, e), now)
	}
	return until(sp.next, now)
}

// fits returns the smallest elapsed time e within a window of length l
// (0 <= e < l) at which previous·min(lp, l-e)/lp, the weight of a previous
// window of length lp, plus what the window holds leaves room for the
// request, where room is the capacity less the window's count and the
// request's cost; ok is false when no such e is in the window.
func fits(previous, room, l, lp int64) (e int64, ok bool) {
	switch {
	case room < 0:
		return 0, false
	case previous <= 0:
		return 0, true
	}
	// previous·min(lp, l-e) <= room·lp holds once min(lp, l-e) <= f,
	// f = floor(room·lp/previous): at once when f reaches lp or l,
	// otherwise from e = l - f.
	f := mulDiv(uint64(room), uint64(lp), uint64(previous))
	switch {
	case f >= uint64(min(l, lp)):
		return 0, true
	case f == 0:
		return 0, false // only once the previous window is gone: the next one
	}
	return l - int64(f), true
}

// reset is the time until the estimate falls to zero: the end of the next
// window while this one has a count, of this one while only the previous has.
func (a *SlidingCounter) reset(s codec.Counter, sp windowSpan, now int64) int64 {
	switch {
	case s.Count > 0:
		return until(sp.next, now)
	case s.Previous > 0:
		return until(sp.end, now)
	}
	return 0
}

// A rule's calendar can change under its records: a reload that fixes its
// time zone, or moves its anchor (the billing day, the hour a day starts).
// A record written under the old calendar starts at an instant that is not
// a boundary of the new one, and its count cannot be dropped (that would
// hand every caller a fresh period) nor kept whole in the window in
// progress (a record of the old November, stepped just after the new
// December began, would charge the caller's whole November to December).
// What it holds is read as spent evenly from its window's start to now,
// the instant it is first stepped, and each window of the new calendar is
// charged the part of that time it covers, rounded up: a zone fix a week
// into the month keeps nearly all of it, a billing day moved from the 15th
// to the 1st a week into December keeps December's week of it, and a record
// starting after the window in progress (the billing day moved later) is
// kept whole until the window ends. The record is then rewritten at the new
// calendar's boundary. With a window of fixed length (no calendar) a record
// always starts at a boundary, and none of this applies.

// foreign reports whether a record starting at start was written under
// another calendar: start is not one of this calendar's boundaries.
func (r *rate) foreign(start int64) bool {
	return r.cal != nil && r.cal.compute(start).start != start
}

// carry returns the part of count, spent evenly over [from, now] (a
// record's start to now), that falls in the window [start, end), rounded
// up; all of count when from is at or after start (the record started in
// the window in progress, or, the clock having stepped back, later).
func (r *rate) carry(from, count, now, start, end int64) int64 {
	switch {
	case count <= 0:
		return 0
	case from >= start:
		return count
	}
	return share(count, from, max(now, from+1), start, end)
}

// carryCounter is carry for a sliding counter's record s, stepped at now in
// the windows sp: its count is shared between the window in progress and
// the previous one, and its previous count, read as spent evenly over a
// window as long as sp's previous one that ended at s.Start, charges the
// previous window the part it covers.
func (a *SlidingCounter) carryCounter(s codec.Counter, now int64, sp windowSpan) codec.Counter {
	if s.Start >= sp.start {
		return codec.Counter{Start: sp.start, Count: max(s.Count, 0), Previous: max(s.Previous, 0)}
	}
	to := max(now, s.Start+1)
	out := codec.Counter{Start: sp.start, Count: a.carry(s.Start, s.Count, now, sp.start, sp.end)}
	if s.Count > 0 {
		out.Previous = share(s.Count, s.Start, to, sp.prev, sp.start)
	}
	if s.Previous > 0 {
		out.Previous = satAdd(out.Previous, share(s.Previous, satAdd(s.Start, -(sp.start-sp.prev)), s.Start, sp.prev, sp.start))
	}
	return out
}

// share returns ceil(n·|[from,to) ∩ [start,end)| / (to-from)): the part of
// n spread evenly over [from, to) that falls in [start, end). from < to,
// start < end and n > 0.
func share(n, from, to, start, end int64) int64 {
	lo, hi := max(from, start), min(to, end)
	if hi <= lo {
		return 0
	}
	return clampI64(mulDivCeil(uint64(n), uint64(hi)-uint64(lo), uint64(to)-uint64(from)))
}

// span returns the windows around now: the calendar's, or whole windows
// from the epoch.
func (r *rate) span(now int64) windowSpan {
	if r.cal != nil {
		return r.cal.span(now)
	}
	start := align(now, r.window)
	end := satAdd(start, r.window)
	return windowSpan{prev: start - r.window, start: start, end: end, next: satAdd(end, r.window)}
}

// spanFrom returns the windows around a window that starts at start: a
// stored record's, later than the window of a clock that stepped back. A
// start that is not a boundary (the record of another window length, or
// calendar) starts a window cut short.
func (r *rate) spanFrom(start int64) windowSpan {
	if r.cal == nil {
		end := satAdd(start, r.window)
		return windowSpan{prev: start - r.window, start: start, end: end, next: satAdd(end, r.window)}
	}
	sp := r.cal.span(start)
	sp.start = start
	return sp
}

// endOf returns the end of the window that starts at start, as spanFrom.
func (r *rate) endOf(start int64) int64 {
	if r.cal == nil {
		return satAdd(start, r.window)
	}
	return r.cal.span(start).end
}

// windowStart returns the start of the window holding t.
func (r *rate) windowStart(t int64) int64 {
	if r.cal == nil {
		return align(t, r.window)
	}
	return r.cal.span(t).start
}
