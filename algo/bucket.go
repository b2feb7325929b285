package algo

import "github.com/sluice-go/sluice/codec"

// unit is the number of nano-tokens in one token. Bucket levels are kept in
// nano-tokens so that refill is exact to the nanosecond for any rate.
const unit = 1_000_000_000

// accrue returns how many nano-tokens accrue between from and now at the
// rule's rate, at most room, and the time the next accrual counts from.
// When the accrual is not capped, that time is from plus the whole
// nanoseconds the returned units took (rounded up), so the fraction of a unit
// earned in the last nanoseconds is kept rather than lost; what is lost is
// under a nanosecond's worth, and never granted. Capped, it is now.
func (r *rate) accrue(from, now, room int64) (units, anchor int64) {
	if now <= from {
		return 0, from
	}
	if room <= 0 {
		return 0, now
	}
	ls := uint64(r.limit) * unit
	elapsed := uint64(now - from)
	q, rem := mulDivRem(elapsed, ls, uint64(r.window))
	if q >= uint64(room) {
		return room, now
	}
	// rem < window, so rem/ls is zero (and its division skipped) unless
	// the rate is under one token a second.
	back := uint64(0)
	if rem >= ls {
		back = rem / ls
	}
	return int64(q), from + int64(elapsed-back)
}

// timeFor returns the nanoseconds units take to accrue at the rule's rate,
// rounded up.
func (r *rate) timeFor(units int64) int64 {
	if units <= 0 {
		return 0
	}
	return clampI64(mulDivCeil(uint64(units), uint64(r.window), uint64(r.limit)*unit))
}

// after returns how long after now the moment units have accrued, counting
// from from, falls: zero when it is not after now.
func (r *rate) after(from, units, now int64) int64 {
	return until(satAdd(from, r.timeFor(units)), now)
}

// TokenBucket holds up to capacity tokens, refilled continuously at
// limit/window. A request of cost n takes n tokens, or is denied until
// enough have refilled.
//
// The record keeps the tokens spent and not yet refilled rather than the
// tokens left, so that a rule whose limit changes keeps what each caller
// spent: raising the capacity gives a throttled caller the difference at
// once, lowering it leaves nobody above the new capacity (a caller who
// spent more than it waits for the excess to refill). A record of the first
// layout, which kept the tokens left, is read as spent against the current
// capacity: exact when the capacity has not changed since it was written.
type TokenBucket struct{ rate }

// Name returns "token_bucket".
func (*TokenBucket) Name() Name { return TokenBucketName }

// Step answers one request; see Algorithm.
func (a *TokenBucket) Step(state []byte, now, cost int64) ([]byte, Decision) {
	var d Decision
	next := a.StepInto(state, now, cost, &d)
	return next, d
}

// StepInto is Step writing the decision to *d (every field) rather than
// returning it, so that a caller holding the concrete type keeps the
// decision in its own frame instead of copying it through the stack.
func (a *TokenBucket) StepInto(state []byte, now, cost int64, d *Decision) []byte {
	// A whole current record, the common case, is read inline.
	s, ok := codec.ReadTokenBucket(state)
	corrupt := false
	if !ok {
		var err error
		if s, err = codec.DecodeTokenBucket(state); err != nil {
			s, corrupt = a.fromOther(state, now)
		}
	}
	full := a.capacity * unit
	stored := s
	refilled, anchor := a.accrue(s.Updated, now, s.Spent)
	s.Spent -= refilled
	s.Updated = anchor
	need := a.clampCost(cost) * unit
	// The room is full-Spent, negative when the capacity was lowered under
	// what was spent; Spent > full-need is need > room written so that it
	// cannot overflow. Durations are timed from the stored record, exactly:
	// while anything is spent the refill since then is uncapped, and the
	// anchor may have dropped a fraction of a nano-token.
	if !a.validCost(cost) || s.Spent > full-need {
		a.denyInto(d, corrupt, (full-s.Spent)/unit, a.after(stored.Updated, satAdd(need-full, stored.Spent), now), a.after(stored.Updated, stored.Spent, now))
		return nil
	}
	s.Spent += need
	ttl := a.after(s.Updated, s.Spent, now)
	next := codec.AppendTokenBucket(state, s)
	a.allowInto(d, corrupt, (full-s.Spent)/unit, ttl, 0)
	return next
}

// fromOther returns the state a record that is not a current token bucket
// stands for: a first-layout token bucket's tokens left, read as spent
// against the current capacity; otherwise a full bucket, with whether the
// record was corrupt.
func (a *TokenBucket) fromOther(state []byte, now int64) (codec.TokenBucket, bool) {
	if codec.IsTokenBucketV1(state) {
		if b, err := codec.DecodeBucket(state, codec.TagTokenBucket); err == nil {
			return codec.TokenBucket{Updated: b.Updated, Spent: max(0, a.capacity*unit-b.Level)}, false
		}
	}
	return codec.TokenBucket{Updated: now}, isCorrupt(state)
}

// LeakyBucket is a queue of depth capacity draining at limit/window. It
// admits what a token bucket would, and each admitted request carries the
// Delay until the work queued ahead of it has drained, so a burst leaves at
// an even rate.
type LeakyBucket struct{ rate }

// Name returns "leaky_bucket".
func (*LeakyBucket) Name() Name { return LeakyBucketName }

// Step answers one request; see Algorithm.
func (a *LeakyBucket) Step(state []byte, now, cost int64) ([]byte, Decision) {
	var d Decision
	next := a.StepInto(state, now, cost, &d)
	return next, d
}

// StepInto is Step writing the decision to *d (every field) rather than
// returning it, so that a caller holding the concrete type keeps the
// decision in its own frame instead of copying it through the stack.
func (a *LeakyBucket) StepInto(state []byte, now, cost int64, d *Decision) []byte {
	full := a.capacity * unit
	s, err := codec.DecodeBucket(state, codec.TagLeakyBucket)
	corrupt := err != nil && isCorrupt(state)
	if err != nil {
		s = codec.Bucket{Updated: now}
	}
	stored := s
	drained, anchor := a.accrue(s.Updated, now, s.Level)
	s.Level -= drained
	s.Updated = anchor
	need := a.clampCost(cost) * unit
	// The room is full-Level, negative when the capacity was lowered under
	// the queued work; need-room is written so that it cannot overflow.
	// Durations are timed from the stored record, exactly: while work is
	// queued the drain since then is uncapped, and the anchor may have
	// dropped a fraction of a nano-token.
	if !a.validCost(cost) || s.Level > full-need {
		a.denyInto(d, corrupt, (full-s.Level)/unit, a.after(stored.Updated, satAdd(need-full, stored.Level), now), a.after(stored.Updated, stored.Level, now))
		return nil
	}
	delay := a.after(stored.Updated, stored.Level, now)
	s.Level += need
	ttl := a.after(s.Updated, s.Level, now)
	next := codec.AppendBucket(state, codec.TagLeakyBucket, s)
	a.allowInto(d, corrupt, (full-s.Level)/unit, ttl, delay)
	return next
}

// GCRA is the generic cell rate algorithm: a token bucket kept as a single
// theoretical arrival time (TAT). Each token is worth one emission interval,
// window/limit rounded up to the nanosecond; an admitted request of cost n
// moves the TAT n intervals later, and a request is admitted while the TAT
// stays within capacity intervals of now.
//
// Counting whole intervals keeps the arithmetic exact with one integer of
// state: a burst of exactly capacity passes at a frozen clock, whatever the
// costs, and the bucket refills one token per interval. The price is that
// the sustained rate is one token per whole-nanosecond interval, which for
// window/limit that is not a whole number of nanoseconds is a little below
// limit/window (by under one part in the interval's length in ns). New
// refuses parameters whose interval would be under one nanosecond.
//
// The record holds the TAT and the interval it was counted in (10 to 18
// bytes, 13 at ten tokens a second: still the smallest record), so that a
// rule whose rate changed keeps what each caller spent: (TAT-now)/interval
// tokens, carried into the new interval rounded against the caller. Until
// an admission rewrites it in the new interval, the record goes on refilling
// at the rate it was spent at, and a denial's RetryAfter counts with that.
type GCRA struct {
	rate
	interval int64            // window/limit rounded up: the nanoseconds one token is worth
	tau      int64            // capacity·interval: the burst tolerance
	format   codec.GCRAFormat // the layout of records counted in interval
}

func newGCRA(r rate) *GCRA {
	interval := clampI64(mulDivCeil(1, uint64(r.window), uint64(r.limit)))
	return &GCRA{rate: r, interval: interval, tau: r.capacity * interval, format: codec.NewGCRAFormat(interval)}
}

// Name returns "gcra".
func (*GCRA) Name() Name { return GCRAName }

// Step answers one request; see Algorithm.
func (a *GCRA) Step(state []byte, now, cost int64) ([]byte, Decision) {
	var d Decision
	next := a.StepInto(state, now, cost, &d)
	return next, d
}

// StepInto is Step writing the decision to *d (every field) rather than
// returning it, so that a caller holding the concrete type keeps the
// decision in its own frame instead of copying it through the stack.
func (a *GCRA) StepInto(state []byte, now, cost int64, d *Decision) []byte {
	// A record counted in this rule's interval at a valid cost, the common
	// case, is read and rewritten without decoding its interval, in code
	// that calls nothing (so that nothing is saved to the stack around a
	// call); every other case is stepRecord's. Both answer alike.
	stored, ok := a.format.Read(state)
	if !ok || !a.validCost(cost) {
		return a.stepRecord(state, stored, ok, now, cost, d)
	}
	tat := max(stored, now) // a TAT in the past is a full bucket
	next := satAdd(tat, cost*a.interval)
	if allowAt := next - a.tau; now < allowAt {
		a.denyInto(d, false, a.available(tat, now), until(allowAt, now), until(tat, now))
		return nil
	}
	a.format.Put(state, next)
	a.allowInto(d, false, a.available(next, now), until(next, now), 0)
	return state
}

// stepRecord is StepInto for any record and cost: stored and ok are what
// the format read of state.
func (a *GCRA) stepRecord(state []byte, stored int64, ok bool, now, cost int64, d *Decision) []byte {
	corrupt := false
	if !ok {
		s, err := codec.DecodeGCRA(state)
		corrupt = err != nil && isCorrupt(state)
		if err != nil {
			s = codec.GCRA{TAT: now}
		}
		if s.Interval != a.interval && s.Interval != 0 {
			return a.stepConverted(state, s, now, cost, d)
		}
		stored = s.TAT
	}
	tat := max(stored, now) // a TAT in the past is a full bucket
	// capacity·interval is bounded by New, so only a nonsense TAT saturates.
	next := satAdd(tat, a.clampCost(cost)*a.interval)
	allowAt := next - a.tau
	if !a.validCost(cost) || now < allowAt {
		a.denyInto(d, corrupt, a.available(tat, now), until(allowAt, now), until(tat, now))
		return nil
	}
	ttl := until(next, now)
	var out []byte
	if ok {
		a.format.Put(state, next)
		out = state
	} else {
		out = a.format.Append(state, next)
	}
	a.allowInto(d, corrupt, a.available(next, now), ttl, 0)
	return out
}

// stepConverted is StepInto for a record counted in another interval (a
// rule whose rate changed): the tokens its TAT says are spent, (TAT-now)/
// s.Interval, are carried over into this rule's interval, rounded against
// the caller. An admission writes the record in this rule's interval; until
// then it keeps refilling at the rate it was spent at, which is what the
// RetryAfter and Reset of a denial count with.
func (a *GCRA) stepConverted(state []byte, s codec.GCRA, now, cost int64, d *Decision) []byte {
	debt := uint64(until(s.TAT, now))
	tat := satAdd(now, clampI64(mulDivCeil(debt, uint64(a.interval), uint64(s.Interval))))
	c := a.clampCost(cost)
	next := satAdd(tat, c*a.interval)
	if !a.validCost(cost) || now < next-a.tau {
		// Room for c once ceil((debt-r)·interval/s.Interval) <= tau - c·interval,
		// that is once r >= debt - floor((tau-c·interval)·s.Interval/interval).
		fits := mulDiv(uint64(a.tau-c*a.interval), uint64(s.Interval), uint64(a.interval))
		retry := int64(1) // only an invalid cost gets here with room
		if debt > fits {
			retry = clampI64(debt - fits)
		}
		a.denyInto(d, false, a.available(tat, now), retry, clampI64(debt))
		return nil
	}
	ttl := until(next, now)
	out := codec.AppendGCRA(state, codec.GCRA{TAT: next, Interval: a.interval})
	a.allowInto(d, false, a.available(next, now), ttl, 0)
	return out
}

// available returns the whole tokens a bucket with this TAT (not before now)
// holds at now.
func (a *GCRA) available(tat, now int64) int64 {
	debt := until(tat, now)
	if debt >= a.tau {
		return 0
	}
	return (a.tau - debt) / a.interval
}
