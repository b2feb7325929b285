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
// nanoseconds the returned units took, so the fraction of a unit earned in
// the last nanoseconds is kept rather than lost; capped, it is now.
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
	return int64(q), from + int64(elapsed-rem/ls)
}

// timeFor returns the nanoseconds units take to accrue at the rule's rate,
// rounded up.
func (r *rate) timeFor(units int64) int64 {
	if units <= 0 {
		return 0
	}
	return clampI64(mulDivCeil(uint64(units), uint64(r.window), uint64(r.limit)*unit))
}

// TokenBucket holds up to capacity tokens, refilled continuously at
// limit/window. A request of cost n takes n tokens, or is denied until
// enough have refilled.
type TokenBucket struct{ rate }

// Name returns "token_bucket".
func (*TokenBucket) Name() string { return TokenBucketName }

// Step answers one request; see Algorithm.
func (a *TokenBucket) Step(state []byte, now, cost int64) ([]byte, Decision) {
	full := a.capacity * unit
	s, err := codec.DecodeBucket(state, codec.TagTokenBucket)
	corrupt := err != nil && state != nil
	if err != nil {
		s = codec.Bucket{Updated: now, Level: full}
	}
	s.Level = min(s.Level, full) // the capacity may have been lowered
	add, anchor := a.accrue(s.Updated, now, full-s.Level)
	s.Level += add
	s.Updated = anchor
	if !a.validCost(cost) || s.Level < cost*unit {
		d := a.deny(s.Level/unit, s.Updated+a.timeFor(max(cost, 1)*unit-s.Level)-now, s.Updated+a.timeFor(full-s.Level)-now)
		d.CorruptState = corrupt
		return nil, d
	}
	s.Level -= cost * unit
	ttl := max(0, s.Updated+a.timeFor(full-s.Level)-now)
	return codec.AppendBucket(state, codec.TagTokenBucket, s), Decision{
		Allowed:      true,
		Limit:        a.capacity,
		Remaining:    s.Level / unit,
		Reset:        time.Duration(ttl),
		TTL:          time.Duration(ttl),
		CorruptState: corrupt,
	}
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
	full := a.capacity * unit
	s, err := codec.DecodeBucket(state, codec.TagLeakyBucket)
	corrupt := err != nil && state != nil
	if err != nil {
		s = codec.Bucket{Updated: now}
	}
	drained, anchor := a.accrue(s.Updated, now, s.Level)
	s.Level -= drained
	s.Updated = anchor
	room := full - s.Level // negative when the capacity was lowered
	if !a.validCost(cost) || cost*unit > room {
		d := a.deny(room/unit, s.Updated+a.timeFor(max(cost, 1)*unit-room)-now, s.Updated+a.timeFor(s.Level)-now)
		d.CorruptState = corrupt
		return nil, d
	}
	delay := max(0, s.Updated+a.timeFor(s.Level)-now)
	s.Level += cost * unit
	ttl := max(0, s.Updated+a.timeFor(s.Level)-now)
	return codec.AppendBucket(state, codec.TagLeakyBucket, s), Decision{
		Allowed:      true,
		Limit:        a.capacity,
		Remaining:    (full - s.Level) / unit,
		Reset:        time.Duration(ttl),
		Delay:        time.Duration(delay),
		TTL:          time.Duration(ttl),
		CorruptState: corrupt,
	}
}

// GCRA is the generic cell rate algorithm: a token bucket kept as a single
// theoretical arrival time (TAT). Each admitted request of cost n moves the
// TAT n·window/limit later, rounded up to the nanosecond; a request is
// admitted while the TAT stays within capacity·window/limit of now.
type GCRA struct {
	rate
	tau int64 // capacity·window/limit, rounded up: the burst tolerance
}

// Name returns "gcra".
func (*GCRA) Name() string { return GCRAName }

// Step answers one request; see Algorithm.
func (a *GCRA) Step(state []byte, now, cost int64) ([]byte, Decision) {
	s, err := codec.DecodeGCRA(state)
	corrupt := err != nil && state != nil
	if err != nil {
		s.TAT = now
	}
	tat := max(s.TAT, now) // a TAT in the past is a full bucket
	inc := clampI64(mulDivCeil(uint64(max(cost, 1)), uint64(a.window), uint64(a.limit)))
	next := satAdd(tat, inc)
	allowAt := next - a.tau
	if !a.validCost(cost) || now < allowAt {
		d := a.deny(a.available(tat, now), allowAt-now, tat-now)
		d.CorruptState = corrupt
		return nil, d
	}
	ttl := next - now
	return codec.AppendGCRA(state, codec.GCRA{TAT: next}), Decision{
		Allowed:      true,
		Limit:        a.capacity,
		Remaining:    a.available(next, now),
		Reset:        time.Duration(ttl),
		TTL:          time.Duration(ttl),
		CorruptState: corrupt,
	}
}

// available returns the whole tokens a bucket with this TAT holds at now.
func (a *GCRA) available(tat, now int64) int64 {
	slack := a.tau - (tat - now)
	if slack <= 0 {
		return 0
	}
	return min(a.capacity, int64(mulDiv(uint64(slack), uint64(a.limit), uint64(a.window))))
}
