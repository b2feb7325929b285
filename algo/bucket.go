package algo

import (
	"time"

	"github.com/sluice-go/sluice/codec"
)

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
type TokenBucket struct{ rate }

// Name returns "token_bucket".
func (*TokenBucket) Name() string { return TokenBucketName }

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
	full := a.capacity * unit
	s, err := codec.DecodeBucket(state, codec.TagTokenBucket)
	corrupt := err != nil && isCorrupt(state)
	if err != nil {
		s = codec.Bucket{Updated: now, Level: full}
	}
	s.Level = min(s.Level, full) // the capacity may have been lowered
	stored := s
	add, anchor := a.accrue(s.Updated, now, full-s.Level)
	s.Level += add
	s.Updated = anchor
	need := a.clampCost(cost) * unit
	if !a.validCost(cost) || s.Level < need {
		// Below need the bucket is not full, so the refill since the stored
		// record is uncapped: time it from there, exactly, rather than from
		// the anchor, which may have dropped a fraction of a nano-token.
		a.denyInto(d, corrupt, s.Level/unit, a.after(stored.Updated, need-stored.Level, now), a.after(stored.Updated, full-stored.Level, now))
		return nil
	}
	s.Level -= need
	ttl := a.after(s.Updated, full-s.Level, now)
	next := codec.AppendBucket(state, codec.TagTokenBucket, s)
	d.Allowed = true
	d.Limit = a.capacity
	d.Remaining = s.Level / unit
	d.RetryAfter = 0
	d.Reset = time.Duration(ttl)
	d.Delay = 0
	d.TTL = time.Duration(ttl)
	d.CorruptState = corrupt
	return next
}

// LeakyBucket is a queue of depth capacity draining at limit/window. It
// admits what a token bucket would, and each admitted request carries the
// Delay until the work queued ahead of it has drained, so a burst leaves at
// an even rate.
type LeakyBucket struct{ rate }

// Name returns "leaky_bucket".
func (*LeakyBucket) Name() string { return LeakyBucketName }

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
	d.Allowed = true
	d.Limit = a.capacity
	d.Remaining = (full - s.Level) / unit
	d.RetryAfter = 0
	d.Reset = time.Duration(ttl)
	d.Delay = time.Duration(delay)
	d.TTL = time.Duration(ttl)
	d.CorruptState = corrupt
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
type GCRA struct {
	rate
	interval int64 // window/limit rounded up: the nanoseconds one token is worth
	tau      int64 // capacity·interval: the burst tolerance
}

func newGCRA(r rate) *GCRA {
	interval := clampI64(mulDivCeil(1, uint64(r.window), uint64(r.limit)))
	return &GCRA{rate: r, interval: interval, tau: r.capacity * interval}
}

// Name returns "gcra".
func (*GCRA) Name() string { return GCRAName }

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
	s, err := codec.DecodeGCRA(state)
	corrupt := err != nil && isCorrupt(state)
	if err != nil {
		s.TAT = now
	}
	tat := max(s.TAT, now) // a TAT in the past is a full bucket
	// capacity·interval is bounded by New, so only a nonsense TAT saturates.
	next := satAdd(tat, a.clampCost(cost)*a.interval)
	allowAt := next - a.tau
	if !a.validCost(cost) || now < allowAt {
		a.denyInto(d, corrupt, a.available(tat, now), until(allowAt, now), until(tat, now))
		return nil
	}
	ttl := until(next, now)
	out := codec.AppendGCRA(state, codec.GCRA{TAT: next})
	d.Allowed = true
	d.Limit = a.capacity
	d.Remaining = a.available(next, now)
	d.RetryAfter = 0
	d.Reset = time.Duration(ttl)
	d.Delay = 0
	d.TTL = time.Duration(ttl)
	d.CorruptState = corrupt
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
