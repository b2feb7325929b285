package sluice

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// The request path of a Door, in its order (Door's steps): Decide matches
// and hands the enforced rules to enforce, then the shadow rules to
// shadow; each keys its rules and calls decide, which spends on the
// engine, falls back on a store error and tells the observers; pick and
// pickShadow choose what the answer reports.

// maxStackRules is how many rules of one request are decided without
// allocating.
const maxStackRules = 8

// Decide decides req, a request with the given method (empty for a gRPC
// call) and path (a gRPC call's full method name; matched in the
// ruleset's match form, Ruleset.MatchPath), under rs, the ruleset
// in force (read it once per request: Registry.Ruleset). ctx is the
// request's context: it bounds what the engine waits for on the store
// (see package engine's Context), and a ContextObserver is told the
// Outcome with it. See Door for the steps and Outcome for the answer.
func (d *Door[R]) Decide(ctx context.Context, rs *Ruleset, method, path string, req R) (out Outcome) {
	if d.ctxObs != nil {
		defer func() { d.ctxObs.ObserveOutcome(ctx, out) }()
	}
	q := Shape{Method: method, Path: rs.MatchPath(path)}
	if d.plan != nil && rs.HasPlans() {
		var err error
		if q.Plan, err = d.planOf(req); err != nil {
			out.Verdict, out.Err = Unidentified, &KeyError{Err: err}
			return out
		}
	}
	if d.host != nil && rs.HasHostRules() {
		q.Host = RequestHost(d.host(req))
	}
	var stack [maxStackRules]*CompiledRule
	if rules := rs.appendMatch(stack[:0], q); len(rules) > 0 && !d.enforce(ctx, &out, rs, q, req, rules) {
		return out
	}
	if rs.HasShadow() {
		if rules := rs.appendMatchShadow(stack[:0], q); len(rules) > 0 {
			d.shadow(ctx, &out, rs, q, req, rules)
		}
	}
	return out
}

// enforce decides the request under rules, the enforced rules covering it
// (the caller's own slice), into out. It reports whether the shadow rules
// decide the request too: when it passes, decided or undecided by a store
// error under FailOpen.
func (d *Door[R]) enforce(ctx context.Context, out *Outcome, rs *Ruleset, q Shape, req R, rules []*CompiledRule) bool {
	// The engine's requests, in an array of this frame: one, or up to
	// maxStackRules.
	var one [1]engine.Request
	reqs := one[:0]
	if len(rules) > 1 {
		var many [maxStackRules]engine.Request
		reqs = many[:0]
	}
	keep := rules[:0]
	for _, c := range rules {
		key, cost, err := d.keyOf(req, c)
		if err != nil {
			out.Verdict, out.Err = Unidentified, &KeyError{Rule: c, Err: err}
			return false
		}
		if d.exempt != nil && d.exempt(key) {
			continue // no rule limits this caller under c
		}
		c = rs.Override(c, key)
		keep = append(keep, c)
		reqs = append(reqs, engine.Request{Limit: c.limit, Key: key, Cost: cost})
	}
	if len(reqs) == 0 {
		out.Verdict = Passed // the caller is exempt under every rule
		return false
	}
	var dstack [1]algo.Decision
	rules, reqs, ds, all, at, err := d.decide(ctx, q, keep, reqs, &dstack, d.policy, false)
	if err != nil {
		out.Rule, out.Key, out.Err = rules[at], reqs[at].Key, err
		switch {
		case ended(ctx, err): // no one waits for the answer; nothing was spent
			out.Verdict = Unavailable
		case !isStoreError(err):
			out.Verdict = Failed
		case d.local != nil || d.policy == FailClosed: // under FailLocal, the local engine failed too
			out.Verdict = Unavailable
		default: // FailOpen: the request passes undecided
			out.Verdict, out.Rule, out.Key, out.Err = Passed, nil, "", nil
			return true
		}
		return false
	}
	i := pick(ds, all)
	out.Rule, out.Key, out.Decision = rules[i], reqs[i].Key, ds[i]
	if !all {
		out.Verdict, out.Decision.Allowed = Denied, false // rule i denies; be explicit all the same
		return false
	}
	out.Verdict = Allowed
	for _, di := range ds {
		out.Delay = max(out.Delay, di.Delay)
	}
	return true
}

// shadow decides the request under rules, the shadow rules covering it
// (the caller's own slice), into out's Shadow fields. Nothing it meets
// refuses the request.
func (d *Door[R]) shadow(ctx context.Context, out *Outcome, rs *Ruleset, q Shape, req R, rules []*CompiledRule) {
	var one [1]engine.Request
	reqs := one[:0]
	if len(rules) > 1 {
		var many [maxStackRules]engine.Request
		reqs = many[:0]
	}
	for i, c := range rules {
		key, cost, err := d.keyOf(req, c)
		if err != nil {
			out.ShadowErr = &KeyError{Rule: c, Err: err}
			return
		}
		c = rs.Override(c, key)
		rules[i] = c
		reqs = append(reqs, engine.Request{Limit: c.limit, Key: key, Cost: cost})
	}
	// A shadow rule never refuses a request: a store error under it is
	// FailOpen's, unless the policy decides locally.
	policy := FailOpen
	if d.local != nil {
		policy = FailLocal
	}
	var dstack [1]algo.Decision
	rules, _, ds, all, _, err := d.decide(ctx, q, rules, reqs, &dstack, policy, true)
	if err != nil {
		return
	}
	i := pickShadow(ds)
	out.Shadow, out.ShadowDecision, out.ShadowDenied = rules[i], ds[i], !all
	out.ShadowDecision.Allowed, out.ShadowDecision.RetryAfter, out.ShadowDecision.Delay = true, 0, 0 // the request passes, at once
}

// decide decides reqs, a request q's under rules, on the engine (the
// decision of one rule in *one), and on a store error under FailLocal on
// the Local, under each rule's share. It counts a store error under
// policy and logs it, logs any other error, and tells the observers and
// the tally of the decisions. It returns the rules and the requests as
// they decided (the shares, after a fallback: rules and reqs, which may be
// the caller's stack arrays, are replaced, not written to), the decisions
// and whether all allowed. An error is one no decision came of, and at the
// index of the request it concerns (the Redis Cluster slot's call of an
// engine.RequestError, else the first). An error wrapping ctx's own,
// ctx having ended, is neither counted nor logged, nor decided locally:
// no one waits for the answer. The slices are separate arguments, not a
// struct's fields, so that the caller's arrays stay on its stack.
func (d *Door[R]) decide(ctx context.Context, q Shape, rules []*CompiledRule, reqs []engine.Request, one *[1]algo.Decision, policy StoreErrorPolicy, shadow bool) (
	_ []*CompiledRule, _ []engine.Request, ds []algo.Decision, all bool, at int, err error) {
	var start time.Time
	if d.metrics != nil { // time the decision only for someone to see it
		start = time.Now()
	}
	ds, all, err = decideOn(ctx, d.eng, reqs, one)
	local := false
	if err != nil && ended(ctx, err) {
		var re *engine.RequestError
		if errors.As(err, &re) && re.Request < len(reqs) {
			at = re.Request
		}
		return rules, reqs, nil, false, at, err
	}
	if err != nil && isStoreError(err) {
		var re *engine.RequestError
		if errors.As(err, &re) && re.Request < len(reqs) {
			at = re.Request
		}
		d.storeError(rules[at], policy, err)
		if d.local == nil {
			return rules, reqs, nil, false, at, err
		}
		rules, reqs = d.local.requests(rules, reqs)
		local, at = true, 0
		ds, all, err = decideOn(ctx, d.local.eng, reqs, one)
	}
	if err != nil {
		d.log.Error(d.name+": cannot decide the request", "rule", rules[at].Name(),
			"method", q.Method, "path", q.Path, "local", local, "shadow", shadow, "err", err)
		return rules, reqs, nil, false, at, err
	}
	var elapsed time.Duration
	if d.metrics != nil {
		elapsed = time.Since(start)
	}
	for i, di := range ds {
		if d.metrics != nil {
			d.observe(rules[i].Name(), all, di.Allowed, reqs[i].Cost, elapsed, local, shadow)
		}
		if d.tally != nil {
			d.tally(rules[i].configured(), reqs[i].Key, reqs[i].Cost, all || di.Allowed)
		}
	}
	return rules, reqs, ds, all, 0, nil
}

// decideOn decides reqs on e: engine.Apply for one, its decision stored in
// *one, engine.ApplyAll for several. all reports whether every request was
// allowed (and spent); when not, nothing was spent.
func decideOn(ctx context.Context, e *engine.Engine, reqs []engine.Request, one *[1]algo.Decision) (ds []algo.Decision, all bool, err error) {
	if len(reqs) == 1 {
		one[0], err = e.Apply(ctx, reqs[0].Limit, reqs[0].Key, reqs[0].Cost)
		return one[:], one[0].Allowed, err
	}
	return e.ApplyAll(ctx, reqs)
}

// observe tells Metrics of one rule's decision in a request decided all
// together (all: whether every rule allowed). When one rule denies, the
// denying rules are counted and the others, which spent nothing, are not;
// a shadow rule's denial is a would-be denial, neither a denial nor a
// local decision.
func (d *Door[R]) observe(rule string, all, allowed bool, cost int64, elapsed time.Duration, local, shadow bool) {
	switch {
	case all:
		d.metrics.ObserveDecisionCost(rule, true, cost, elapsed)
	case allowed:
		return
	case shadow:
		if d.shadowObs != nil {
			d.shadowObs.ObserveShadowDenial(rule, cost, elapsed)
		}
		return
	default:
		d.metrics.ObserveDecisionCost(rule, false, cost, elapsed)
	}
	if local && d.localObs != nil {
		d.localObs.ObserveLocalDecision(rule, all)
	}
}

// pick returns the index of the decision among ds the answer reports, all
// being decideOn's: when some deny, the denying one with the longest
// RetryAfter (the first of those tied), else the one with the least
// Remaining (the first of those tied).
func pick(ds []algo.Decision, all bool) int {
	p := 0
	for i := 1; i < len(ds); i++ {
		di := ds[i]
		if !all {
			if !di.Allowed && (ds[p].Allowed || di.RetryAfter > ds[p].RetryAfter) {
				p = i
			}
		} else if di.Remaining < ds[p].Remaining {
			p = i
		}
	}
	return p
}

// pickShadow returns the index of the shadow decision among ds a door
// reports: the one with the least Remaining (the first of those tied).
func pickShadow(ds []algo.Decision) int {
	p := 0
	for i, di := range ds {
		if di.Remaining < ds[p].Remaining {
			p = i
		}
	}
	return p
}

// keyOf is the door's Key, with the rule's own cost for none and a panic
// returned as a *PanicError.
func (d *Door[R]) keyOf(req R, rule *CompiledRule) (key string, cost int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v}
		}
	}()
	if key, cost, err = d.key(req, rule); err != nil {
		return "", 0, err
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

// ended reports whether err is the engine's for ctx having ended (its
// deadline passed, or it was cancelled) before a decision was made.
func ended(ctx context.Context, err error) bool {
	cerr := ctx.Err()
	return cerr != nil && errors.Is(err, cerr)
}

// isStoreError reports an engine error that the store-error policy
// applies to.
func isStoreError(err error) bool {
	return errors.Is(err, engine.ErrStore) || errors.Is(err, engine.ErrClosed)
}

// storeError counts a store error under rule and the policy that applies,
// and logs it, at most one line a second; the line says how many were not
// logged since the previous one.
func (d *Door[R]) storeError(rule *CompiledRule, policy StoreErrorPolicy, err error) {
	if d.metrics != nil {
		d.metrics.ObserveStoreError(rule.Name(), policy)
	}
	if ok, suppressed := d.storeLog.Let(time.Now().UnixNano()); ok {
		d.log.Warn(d.name+": rate limit store error",
			"rule", rule.Name(), "policy", string(policy), "err", err, "suppressed", suppressed)
	}
}
