package sluice

import (
	"context"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// Usage is what one caller has left under the rules that apply to it, as
// Door.Usage and Door.UsageAll answer it: a peek at the stored state,
// nothing spent and no record written.
type Usage struct {
	// At is the engine clock's time the usage was read at: each limit's
	// Reset and RetryAfter count from it.
	At time.Time
	// Plan is the caller's plan as the door found it, "" for none (or
	// when no rule names a plan, and the door did not ask).
	Plan string
	// Limits are the caller's limits, one per rule that applies: the
	// enforced rules first, most specific first, then the shadow rules.
	Limits []LimitUsage
}

// LimitUsage is one caller's state under one rule.
type LimitUsage struct {
	// Rule is the rule as it applies to the caller: with its override
	// (Override), or as configured.
	Rule *CompiledRule
	// Key is the caller's key under Rule, as the store holds it: at a
	// level of a group within its tenant, backend.NestedKey's (group.go;
	// package identity's ShowKey shows it as {TENANT}KEY, and an API
	// key's as keyhash:HEX).
	Key string
	// Override reports that the caller has its own limit under Rule.
	Override bool
	// Exempt reports that Rule does not limit this caller's key
	// (DoorConfig.Exempt): the store is not read, and LimitState is zero
	// but for its Cost.
	Exempt bool
	// LimitState is the caller's state under Rule, for a request of the
	// rule's Cost.
	LimitState
}

// LimitState is a key's state under one engine limit, as PeekState reads
// it.
type LimitState struct {
	// Limit is the capacity: what a full caller may spend at once
	// (algo.Capacity). Window is the limit's quota window (algo.Quota):
	// for a calendar limit the longest of its windows, Reset saying when
	// the caller's ends.
	Limit  int64
	Window time.Duration
	// Cost is the cost of the request Allowed and RetryAfter are of.
	Cost int64
	// Remaining is what the caller may spend now: for a concurrency limit,
	// the slots free.
	Remaining int64
	// InUse is, for a concurrency limit, the slots the caller holds; zero
	// for every other algorithm.
	InUse int64
	// Allowed reports whether a request of Cost would pass now.
	Allowed bool
	// RetryAfter is how long until a request of Cost would pass; zero
	// when it would now.
	RetryAfter time.Duration
	// Reset is how long until the caller's whole capacity is back: zero
	// when it is full.
	Reset time.Duration
}

// PeekState reads key's state under l on eng, spending nothing and writing
// no record: what it may spend now, whether a request of cost would pass
// and when, and when it is full again. A key without a record reads as
// full. It is PeekStateAt at the engine clock's time. The errors are
// Record's.
func PeekState(ctx context.Context, eng *engine.Engine, l engine.Limit, key string, cost int64) (LimitState, error) {
	return PeekStateAt(ctx, eng, l, key, cost, eng.Clock().Now())
}

// PeekStateAt is PeekState at now (Unix nanoseconds on the engine's
// clock): the state's RetryAfter and Reset count from now, so now plus
// Reset is exactly the instant the caller is full again (a calendar
// rule's boundary, to the nanosecond). Reading several limits at one now
// makes their answers agree with each other and with the instant shown
// beside them, as Door.Usage does. It reads the record once
// (engine.Engine.Record: one store read, one round trip over Redis) and
// steps copies of it at now, at one unit, at cost and at the whole
// capacity, as Peek would. The errors are Record's.
func PeekStateAt(ctx context.Context, eng *engine.Engine, l engine.Limit, key string, cost, now int64) (LimitState, error) {
	s := LimitState{Cost: cost}
	if l.Algorithm == nil {
		return s, engine.ErrNoAlgorithm
	}
	s.Limit = algo.Capacity(l.Algorithm)
	_, s.Window = algo.Quota(l.Algorithm)
	rec, err := eng.Record(ctx, l, key)
	if err != nil {
		return s, err
	}
	var scratch []byte
	peek := func(n int64) algo.Decision {
		// Step may write its state in place: each peek steps a copy.
		scratch = append(scratch[:0], rec...)
		_, d := l.Algorithm.Step(scratch, now, n)
		return d
	}
	// A decision's Remaining is what is left after the request it answers:
	// what may be spent now is one more than a peek at one unit leaves, or
	// nothing when that unit would be denied.
	one := peek(1)
	if one.Allowed {
		s.Remaining = one.Remaining + 1
	}
	d := one
	if cost != 1 {
		d = peek(cost)
	}
	s.Allowed = d.Allowed
	if !d.Allowed {
		s.RetryAfter = d.RetryAfter
	}
	// A request of the whole capacity passes exactly when the caller is
	// full; denied, it spends nothing, and its Reset is the caller's own.
	if full := peek(s.Limit); !full.Allowed {
		s.Reset = full.Reset
	}
	if _, ok := l.Algorithm.(*algo.Concurrency); ok {
		s.InUse = s.Limit - s.Remaining
	}
	return s, nil
}

// Usage answers, for req, what its caller has left under every rule a
// request of that method and path would be decided under now: the
// enforced rules Decide would match (its plan, its host), each with the
// caller's override, and the shadow rules, with no regard to whether an
// enforced one would let the request through. It spends nothing and writes
// no record: a caller never seen reads as full under each rule. It reads
// the clock once, and the store once per rule (PeekStateAt, every rule at
// the answer's At) and steps the record three times,
// so it costs more than a decision; it is not for the request path.
//
// The caller's key under each rule is the door's Key, the plan its Plan,
// as Decide reads them; the cost each LimitUsage reports is the rule's own
// (a request's cost function and a Settle estimate are not asked). An
// error is a *KeyError (the caller could not be identified) or the
// engine's (the store could not be read).
func (d *Door[R]) Usage(ctx context.Context, rs *Ruleset, method, path string, req R) (Usage, error) {
	q := RequestShape{Method: method, Path: rs.matchPath(path)}
	if d.host != nil && rs.hasHostRules() {
		q.Host = requestHost(d.host(req))
	}
	return d.usage(ctx, rs, req, &q)
}

// UsageAll is Usage for every rule that applies to the caller whatever its
// request: each enforced rule of its plan (the plan's own rules, and the
// plan-less rules they do not replace) whatever their method, path or
// host, each shadow rule, and the default. A rule that counts by a path
// parameter (ScopeParam) is left out: its key is the request's, so ask
// Usage with the path.
func (d *Door[R]) UsageAll(ctx context.Context, rs *Ruleset, req R) (Usage, error) {
	return d.usage(ctx, rs, req, nil)
}

// usage is Usage of the request shape q, or (q nil) of every rule that
// applies to the caller.
func (d *Door[R]) usage(ctx context.Context, rs *Ruleset, req R, q *RequestShape) (Usage, error) {
	// One clock read for the whole answer: every rule is peeked at At, so
	// At plus a limit's Reset is its boundary exactly, not a few
	// microseconds short of it.
	now := d.core.eng.Clock().Now()
	u := Usage{At: time.Unix(0, now)}
	if d.plan != nil && rs.hasPlans() {
		var err error
		if u.Plan, err = d.planOf(req); err != nil {
			return u, &KeyError{Err: err}
		}
	}
	var rules, shadows []*CompiledRule
	if q != nil {
		q.Plan = u.Plan
		rules = rs.appendMatch(nil, *q)
		shadows = rs.appendMatchShadow(nil, *q)
	} else {
		rules = append(rules, rs.forPlan(u.Plan)...)
		shadows = append(shadows, rs.shadow...)
		if rs.def != nil {
			if rs.def.rule.Shadow {
				shadows = append(shadows, rs.def)
			} else {
				rules = append(rules, rs.def)
			}
		}
	}
	path := ""
	if q != nil {
		path = q.Path
	}
	all := append(rules, shadows...)
	keys := make([]engine.Request, 0, len(all)) // each rule's key, in nest's form
	for _, c := range all {
		if q == nil && c.rule.Scope.Param() != "" {
			continue // counted by a path parameter: per request, asked with its path
		}
		key, _, err := d.keyOf(req, c, path)
		if err != nil {
			return u, &KeyError{Rule: c, Err: err}
		}
		all[len(keys)] = c
		keys = append(keys, engine.Request{Key: key})
	}
	all = all[:len(keys)]
	// A rule's own key decides whether the caller is exempt and its
	// override, as Decide's; the store holds a level's within its tenant.
	own := make([]string, len(keys))
	for i := range keys {
		own[i] = keys[i].Key
	}
	if rs.groups {
		if c, err := d.nest(req, path, all, keys); err != nil { // group.go
			return u, &KeyError{Rule: c, Err: err}
		}
	}
	for i, c := range all {
		key := keys[i].Key
		if !c.rule.Shadow && d.exempt != nil && d.exempt(own[i]) {
			u.Limits = append(u.Limits, LimitUsage{Rule: c, Key: key, Exempt: true, LimitState: LimitState{Cost: c.rule.Cost}})
			continue
		}
		o := rs.Override(c, own[i])
		st, err := PeekStateAt(ctx, d.core.eng, o.limit, key, o.rule.Cost, now)
		if err != nil {
			return u, err
		}
		u.Limits = append(u.Limits, LimitUsage{Rule: o, Key: key, Override: o != c, LimitState: st})
	}
	return u, nil
}
