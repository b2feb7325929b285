package sluice

import (
	"context"
	"errors"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// The request path of a Door, in its order (Door's steps): Decide matches
// and hands the enforced rules to enforce, then the shadow rules to
// shadow; each keys its rules into a Batch and hands it to the Decider
// (core.go), which spends on the engine, falls back on a store error and
// tells the observers; Pick chooses what the answer reports.

// maxStackRules is how many rules of one request are decided without
// allocating.
const maxStackRules = 8

// Decide decides req, a request with the given method (empty for a gRPC
// call) and path (a gRPC call's full method name; matched in the
// ruleset's match form, Ruleset.matchPath), under rs, the ruleset
// in force (read it once per request: Registry.Ruleset). ctx is the
// request's context: it bounds what the engine waits for on the store
// (see package engine's Context), and a ContextObserver is told the
// Outcome with it. See Door for the steps and Outcome for the answer.
func (d *Door[R]) Decide(ctx context.Context, rs *Ruleset, method, path string, req R) (out Outcome) {
	if d.ctxObs != nil {
		defer func() { d.ctxObs.ObserveOutcome(ctx, out) }()
	}
	q := RequestShape{Method: method, Path: rs.matchPath(path)}
	if d.plan != nil && rs.hasPlans() {
		var err error
		if q.Plan, err = d.planOf(req); err != nil {
			out.Verdict, out.Err = Unidentified, &KeyError{Err: err}
			return out
		}
	}
	if d.host != nil && rs.hasHostRules() {
		q.Host = requestHost(d.host(req))
	}
	var stack [maxStackRules]*CompiledRule
	if rules := rs.appendMatch(stack[:0], q); len(rules) > 0 && !d.enforce(ctx, &out, rs, req, q.Path, rules) {
		return out
	}
	if rs.hasShadow() {
		if rules := rs.appendMatchShadow(stack[:0], q); len(rules) > 0 {
			d.shadow(ctx, &out, rs, req, q.Path, rules)
		}
	}
	return out
}

// enforce decides the request under rules, the enforced rules covering it
// (the caller's own slice), into out. It reports whether the shadow rules
// decide the request too: when it passes, decided or undecided by a store
// error under FailOpen.
func (d *Door[R]) enforce(ctx context.Context, out *Outcome, rs *Ruleset, req R, path string, rules []*CompiledRule) bool {
	// The engine's requests, in an array of this frame: one, or up to
	// maxStackRules.
	var one [1]engine.Request
	reqs := one[:0]
	if len(rules) > 1 {
		var many [maxStackRules]engine.Request
		reqs = many[:0]
	}
	keep := rules[:0]
	settles, slots := false, 0
	for _, c := range rules {
		key, cost, err := d.keyOf(req, c, path)
		if err != nil {
			out.Verdict, out.Err = Unidentified, &KeyError{Rule: c, Err: err}
			return false
		}
		if d.exempt != nil && d.exempt(key) {
			continue // no rule limits this caller under c
		}
		c = rs.Override(c, key)
		if c.rule.Settle != nil {
			// An estimate above the capacity could never pass: it is
			// taken as the capacity, and the settle charges the rest.
			settles, cost = true, min(cost, c.limit.Algorithm.Params().Capacity())
		}
		if isSlots(c.limit) {
			slots++
		}
		keep = append(keep, c)
		reqs = append(reqs, engine.Request{Limit: c.limit, Key: key, Cost: cost})
	}
	if len(reqs) == 0 {
		out.Verdict = Passed // the caller is exempt under every rule
		return false
	}
	if rs.groups {
		if c, err := d.nest(req, path, keep, reqs); err != nil { // group.go
			out.Verdict, out.Err = Unidentified, &KeyError{Rule: c, Err: err}
			return false
		}
	}
	var held *Held
	var leases []engine.Lease
	if slots > 0 {
		slotsFirst(keep, reqs)
		held = newHeld(slots)
		leases = held.Leases
	}
	var scratch Scratch
	// The reservations stay apart from the Batch: escape analysis sees a
	// struct whole, and one of its fields kept past the call would take
	// the rules' stack array along.
	var reserve []engine.Reservation
	if settles {
		reserve = make([]engine.Reservation, len(reqs))
	}
	res, at, err := d.core.Decide(ctx, Batch{Rules: keep, Reserve: reserve, Leases: leases}, reqs, &scratch)
	if err != nil {
		out.Verdict, out.Rule, out.Key, out.Err = d.core.ErrVerdict(ctx, err), res.Rules[at], res.Requests[at].Key, err
		if out.Verdict == Passed { // FailOpen: the request passes undecided
			out.Rule, out.Key, out.Err = nil, "", nil
			return true
		}
		return false
	}
	ds := res.Decisions
	i := Pick(len(ds), res.Over, func(i int) (algo.Decision, bool) { return ds[i], res.Tried(i) })
	out.Rule, out.Key, out.Decision = res.Rules[i], res.Requests[i].Key, ds[i]
	if res.Over {
		out.Verdict, out.Decision.Allowed = Denied, false // rule i denies; be explicit all the same
		if i < slots {
			// No exact wait exists: a slot comes back when a request
			// ends. The operator says what to tell.
			out.Decision.RetryAfter = out.Rule.rule.retryAfter()
		}
		return false
	}
	out.Verdict = Allowed
	if settles {
		out.Reserved = &Reserved{Rules: append([]*CompiledRule(nil), res.Rules...), Reservations: reserve}
	}
	if held != nil {
		held.hold(res.Rules[:slots])
		out.Held = held
	}
	for _, di := range ds {
		out.Delay = max(out.Delay, di.Delay)
	}
	return true
}

// slotsFirst moves the requests of concurrency limits, and their rules, to
// the front of reqs and rules, keeping the order of each kind: a batch
// takes its slots first (Batch.Leases).
func slotsFirst(rules []*CompiledRule, reqs []engine.Request) {
	n := 0
	for j := range reqs {
		if !isSlots(reqs[j].Limit) {
			continue
		}
		r, q := rules[j], reqs[j]
		copy(rules[n+1:j+1], rules[n:j])
		copy(reqs[n+1:j+1], reqs[n:j])
		rules[n], reqs[n] = r, q
		n++
	}
}

// shadow decides the request under rules, the shadow rules covering it
// (the caller's own slice), into out's Shadow fields. Nothing it meets
// refuses the request.
func (d *Door[R]) shadow(ctx context.Context, out *Outcome, rs *Ruleset, req R, path string, rules []*CompiledRule) {
	var one [1]engine.Request
	reqs := one[:0]
	if len(rules) > 1 {
		var many [maxStackRules]engine.Request
		reqs = many[:0]
	}
	for i, c := range rules {
		key, cost, err := d.keyOf(req, c, path)
		if err != nil {
			out.ShadowErr = &KeyError{Rule: c, Err: err}
			return
		}
		c = rs.Override(c, key)
		rules[i] = c
		reqs = append(reqs, engine.Request{Limit: c.limit, Key: key, Cost: cost})
	}
	var scratch Scratch
	res, _, err := d.core.Decide(ctx, Batch{Rules: rules, Shadow: true}, reqs, &scratch)
	if err != nil {
		return
	}
	ds := res.Decisions
	i := Pick(len(ds), false, func(i int) (algo.Decision, bool) { return ds[i], true })
	out.Shadow, out.ShadowDecision, out.ShadowDenied = res.Rules[i], ds[i], !res.All
	out.ShadowDecision.Allowed, out.ShadowDecision.RetryAfter, out.ShadowDecision.Delay = true, 0, 0 // the request passes, at once
}

// errNULKey refuses a caller key beginning with a NUL byte: the form of a
// level's key within its tenant (backend.NestedKey), which no door's Key
// may make, lest a caller pose as another within a tenant.
var errNULKey = errors.New("sluice: a caller key must not begin with a NUL byte")

// keyOf is the door's Key, with the rule's own cost for none, a key
// beginning with a NUL byte refused (errNULKey) and a panic returned as a
// *PanicError. Under a rule scoped param:NAME the key is the
// parameter's, from path (the request's, in match form), and the door's
// key is not read.
func (d *Door[R]) keyOf(req R, rule *CompiledRule, path string) (key string, cost int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v}
		}
	}()
	if key, cost, err = d.key(req, rule); err != nil {
		return "", 0, err
	}
	if key != "" && key[0] == 0 {
		return "", 0, errNULKey // the form of a level's key within its tenant (backend.NestedKey)
	}
	if rule.pattern != nil && rule.rule.Scope.Param() != "" {
		if key, err = rule.paramKey(path); err != nil {
			return "", 0, err
		}
	}
	if cost <= 0 {
		cost = rule.rule.Cost
	}
	return key, cost, nil
}

// planOf is the door's Plan, with a panic returned as a *PanicError.
func (d *Door[R]) planOf(req R) (plan string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v}
		}
	}()
	return d.plan(req)
}
