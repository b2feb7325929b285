package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// Config configures the middleware New returns.
type Config struct {
	// Engine decides and records requests. Required.
	Engine *engine.Engine
	// Registry holds the rules in force; it is read once per request, so a
	// reload (Registry.Swap) takes effect from the next request on.
	// Required.
	Registry *sluice.Registry
	// Identifier turns a request into the key a rule counts it under; nil
	// means identity.New(identity.Config{}): the default headers, no
	// trusted proxy. Read identity.Identifier before trusting an identity
	// header.
	Identifier *identity.Identifier
	// Identity, when set, supplies the caller's identity in place of the
	// user and API key headers. See IdentityFunc.
	Identity IdentityFunc
	// Metrics, when not nil, is told every decision and store error
	// (package metrics' *Metrics counts them for Prometheus).
	Metrics sluice.Observer
	// OnStoreError is what happens to a request when the store fails:
	// sluice.FailOpen (the default when empty) lets it through,
	// sluice.FailClosed answers 503 Service Unavailable, sluice.FailLocal
	// decides it with Local instead.
	OnStoreError sluice.StoreErrorPolicy
	// Local decides the requests the store could not, under
	// sluice.FailLocal: on its in-process engine, under each rule's share
	// of the fleet (sluice.Local). Required with FailLocal, ignored
	// otherwise. Keep one Local across the middlewares a program builds
	// on reloads, so that what callers spent locally carries over.
	Local *sluice.Local
	// Cost, when set, returns what a request spends under a rule; a result
	// of zero or less means the rule's own cost. When nil every request
	// spends its rule's Cost. A cost above the rule's capacity could never
	// be allowed: such a request is answered 500 and logged, as a
	// configuration error.
	Cost func(r *http.Request, rule *sluice.CompiledRule) int64
	// ShadowHeaders, when true, sets the rate limit headers of a shadow
	// rule's decision (sluice.Rule.Shadow) on a request that no enforced
	// rule covers (never Retry-After: the request passes). False by
	// default: a shadow rule is invisible to clients.
	ShadowHeaders bool
	// DenyStatus is the status of a denied request; zero means 429 Too
	// Many Requests (as nginx's limit_req_status, any of 400 to 599).
	DenyStatus int
	// ProblemDetails, when true, answers a denial with an RFC 9457
	// application/problem+json body naming the rule, its limit and the
	// retry, in place of the one-line text body.
	ProblemDetails bool
	// ResetAsUnixTime, when true, sends X-RateLimit-Reset as the Unix
	// time (seconds) at which the capacity is whole again, as GitHub and
	// ulule/limiter do, in place of the seconds from now.
	ResetAsUnixTime bool
	// Exempt, when set, reports the caller keys (as a rule counts them:
	// "user:alice", "key:" and a hash, "ip:192.0.2.1") no rule limits: a
	// request whose key under a rule is exempt is not decided by it.
	Exempt func(key string) bool
	// Logger receives store errors (at most one line a second), contained
	// panics of the IdentityFunc and other internal errors; nil means
	// slog.Default().
	Logger *slog.Logger

	// wait, when set (by tests), replaces waitDelay.
	wait func(ctx context.Context, d time.Duration) bool
}

// Header names the middleware sets, in canonical form.
const (
	headerLimit       = "X-Ratelimit-Limit"
	headerRemaining   = "X-Ratelimit-Remaining"
	headerReset       = "X-Ratelimit-Reset"
	headerPolicy      = "Ratelimit-Policy"
	headerRateLimit   = "Ratelimit"
	headerRetryAfter  = "Retry-After"
	maxStackRules     = 8
	storeLogInterval  = int64(time.Second)
	unavailableBody   = "rate limiter unavailable"
	deniedBody        = "rate limit exceeded for rule "
	internalErrorBody = "internal server error"
)

// limiter is the state behind one middleware.
type limiter struct {
	eng      *engine.Engine
	reg      *sluice.Registry
	id       *identity.Identifier
	identify IdentityFunc
	metrics  sluice.Observer // nil: nothing observes
	policy   sluice.StoreErrorPolicy
	local    *sluice.Local // with policy FailLocal
	cost     func(*http.Request, *sluice.CompiledRule) int64
	shadowH  bool // ShadowHeaders
	deny     int  // DenyStatus
	problem  bool // ProblemDetails
	unix     bool // ResetAsUnixTime
	exempt   func(string) bool
	log      *slog.Logger
	wait     func(context.Context, time.Duration) bool
	lastLog  atomic.Int64  // Unix ns of the last store error logged
	unlogged atomic.Uint64 // store errors not logged since
}

// New returns rate-limiting middleware of the shape net/http, chi and most
// routers take: func(http.Handler) http.Handler. It fails when Engine or
// Registry is missing or OnStoreError is not a known policy.
//
// For each request it matches the rules in force (Registry.Match). A
// request no rule covers (and no default) passes untouched, without
// headers. Otherwise the caller's key is built for each matching rule's
// scope with the Identifier (and the IdentityFunc, when set), and the
// request is decided:
//
//   - in most_specific mode by the one matching rule (engine.Apply);
//   - in all mode by every matching rule together (engine.ApplyAll):
//     nothing is spent unless all allow, and the response reports the most
//     restrictive decision: the denying rule (the one with the longest
//     Retry-After when several deny), or else the one with the least
//     Remaining.
//
// Every limited response, allowed or denied, carries X-RateLimit-Limit,
// X-RateLimit-Remaining, X-RateLimit-Reset (seconds until the full capacity
// is back, rounded up) and the IETF draft fields RateLimit-Policy
// ("orders-write";q=5;w=60: algo.Quota's quota and window in seconds) and
// RateLimit ("orders-write";r=3;t=24: remaining, and algo.QuotaReset in
// seconds: Retry-After on a denial).
// A denied request is answered 429 Too Many Requests with a short body
// naming the rule and a Retry-After in whole seconds, rounded up, at least
// 1. An allowed leaky-bucket request waits its Delay before it reaches the
// handler; when the request's context ends first (the client went away)
// the handler is not called and nothing is written (the cost stays spent).
//
// A bad identity (identity.ErrBadIdentity: a user id over
// identity.MaxUserIDLen, a repeated identity header, an IdentityFunc error
// matching it) is answered 400. A
// panic in the IdentityFunc is recovered, logged and answered 500: it ends
// that request only. Other identity and engine errors are logged and
// answered 500.
//
// A store error (engine.ErrStore, or engine.ErrClosed) follows
// OnStoreError: FailOpen passes the request to the handler, without rate
// limit headers, logs (at most one line a second) and counts it with
// Metrics.ObserveStoreError; FailClosed answers 503 and counts it. In all
// mode a store error is counted once, under the rule of the request it
// concerns (engine.RequestError: a Redis Cluster slot's call), else the
// most specific rule.
//
// FailLocal logs and counts the store error too, then decides the request
// on Config.Local's in-process engine, under the matching rules' shares
// (sluice.Rule.Share: limit and burst divided by the fleet size, rounded
// up), and answers it as any other decision: headers, 429 with
// Retry-After, a leaky bucket's delay. The headers then report the share
// (X-RateLimit-Limit 4 for a rule of 10 on a fleet of 3). The next request
// tries the store again, so limiting returns to the shared budget as soon
// as the store answers; a store with a circuit breaker (backend/redis)
// fails those attempts at once while it stays down. Should the local
// engine fail too (it is closed), the request is answered 503.
//
// Decisions are counted with Metrics.ObserveDecisionCost, with the latency
// of the engine call (for a local decision, of the failed store call and
// the local one). In all mode, when a rule denies, the denying rules are
// counted denied and the others (which spent nothing) are not counted. A
// local decision is also told to Metrics.ObserveLocalDecision when Metrics
// is a sluice.LocalObserver (package metrics' *Metrics is).
//
// Shadow rules (sluice.Rule.Shadow) never refuse a request. Those covering
// it are decided, after the enforced rules and only for a request they let
// through (or that none covers), together and under the caller's
// overrides: an allowed decision is counted as any other, a would-be denial
// with Metrics.ObserveShadowDenial when Metrics is a sluice.ShadowObserver.
// A shadow decision sets no headers unless Config.ShadowHeaders, and then
// only on a request no enforced rule covers. A store error under a shadow
// rule is counted as FailOpen's (decided locally under FailLocal) and the
// request goes on.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	switch {
	case cfg.Engine == nil:
		return nil, errors.New("httplimit: Config.Engine is required")
	case cfg.Registry == nil:
		return nil, errors.New("httplimit: Config.Registry is required")
	}
	l := &limiter{
		eng:      cfg.Engine,
		reg:      cfg.Registry,
		id:       cfg.Identifier,
		identify: cfg.Identity,
		metrics:  cfg.Metrics,
		policy:   cfg.OnStoreError,
		local:    cfg.Local,
		cost:     cfg.Cost,
		shadowH:  cfg.ShadowHeaders,
		deny:     cfg.DenyStatus,
		problem:  cfg.ProblemDetails,
		unix:     cfg.ResetAsUnixTime,
		exempt:   cfg.Exempt,
		log:      cfg.Logger,
		wait:     cfg.wait,
	}
	switch {
	case l.deny == 0:
		l.deny = http.StatusTooManyRequests
	case l.deny < 400 || l.deny > 599:
		return nil, fmt.Errorf("httplimit: Config.DenyStatus %d: want a client or server error status, 400 to 599", l.deny)
	}
	if l.id == nil {
		var err error
		if l.id, err = identity.New(identity.Config{}); err != nil {
			return nil, err
		}
	}
	var err error
	if l.policy, l.local, err = sluice.DoorPolicy("httplimit", l.policy, l.local); err != nil {
		return nil, err
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.wait == nil {
		l.wait = waitDelay
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.serve(w, r, next)
		})
	}, nil
}

// waitDelay waits d, or until ctx ends; it reports whether it waited d.
func waitDelay(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	rs := l.reg.Ruleset()
	plan, ok := l.callerPlan(w, r, rs) // plan.go
	if !ok {
		return
	}
	var stack [maxStackRules]*sluice.CompiledRule
	q := sluice.Shape{Method: r.Method, Path: r.URL.Path, Plan: plan}
	if rs.HasHostRules() {
		q.Host = sluice.RequestHost(r.Host)
	}
	rules := rs.AppendMatch(stack[:0], q)
	if len(rules) == 0 {
		if srule, sd := l.shadow(r, rs); srule != nil && l.shadowH {
			l.setHeaders(w.Header(), srule, sd)
		}
		next.ServeHTTP(w, r)
		return
	}

	var (
		rule  *sluice.CompiledRule
		d     algo.Decision
		delay time.Duration
		err   error
	)
	if len(rules) == 1 {
		rule = rules[0]
		var key string
		var cost int64
		if key, cost, err = l.keyAndCost(r, rule); err != nil {
			l.identityError(w, r, rule, err)
			return
		}
		if l.exempt != nil && l.exempt(key) {
			next.ServeHTTP(w, r) // no rule limits this caller
			return
		}
		rule = rs.Override(rule, key)
		var start time.Time
		if l.metrics != nil { // time the decision only for someone to see it
			start = time.Now()
		}
		d, err = l.eng.Apply(rule.Limit(), key, cost)
		local := false
		if err != nil && l.local != nil && isStoreError(err) {
			l.storeError(rule, err)
			req := l.local.Request(rule, key, cost)
			rule, cost, local = l.local.Rule(rule), req.Cost, true
			d, err = l.local.Engine().Apply(req.Limit, req.Key, req.Cost)
		}
		var elapsed time.Duration
		if l.metrics != nil {
			elapsed = time.Since(start)
		}
		if err != nil {
			if local {
				l.localError(w, r, rule, err)
				return
			}
			l.engineError(w, r, next, rs, rule, err)
			return
		}
		if l.metrics != nil {
			l.metrics.ObserveDecisionCost(rule.Name(), d.Allowed, cost, elapsed)
			if local {
				l.observeLocal(rule.Name(), d.Allowed)
			}
		}
		delay = d.Delay
	} else {
		if rule, d, delay, ok = l.applyAll(w, r, next, rs, rules); !ok {
			return
		}
	}

	l.setHeaders(w.Header(), rule, d)
	if !d.Allowed {
		if l.problem {
			l.problemBody(w, rule, d)
			return
		}
		// As http.Error would, with fewer allocations.
		w.WriteHeader(l.deny)
		io.WriteString(w, deniedBody+rule.Name()+"\n")
		return
	}
	// The enforced rules let the request through: the shadow rules
	// decide it too, without a say (their headers would not replace the
	// enforced rule's).
	if rs.HasShadow() {
		l.shadow(r, rs)
	}
	if delay > 0 && !l.wait(r.Context(), delay) {
		return // the client went away while waiting
	}
	next.ServeHTTP(w, r)
}

// shadow decides r under the shadow rules that cover it
// (sluice.Ruleset.MatchShadow), each under the caller's override if it has
// one, spending as any rule would, and never refuses it: a would-be denial
// is told to Metrics.ObserveShadowDenial (sluice.ShadowObserver), a store
// error is counted (as under FailOpen, or decided locally under FailLocal)
// and an identity error logged, and the request goes on. It returns the
// rule and the decision, made to allow, for the headers ShadowHeaders
// sets, or nil when no shadow rule decided.
func (l *limiter) shadow(r *http.Request, rs *sluice.Ruleset) (*sluice.CompiledRule, algo.Decision) {
	if !rs.HasShadow() {
		return nil, algo.Decision{}
	}
	var stack [maxStackRules]*sluice.CompiledRule
	q := sluice.Shape{Method: r.Method, Path: r.URL.Path}
	if rs.HasHostRules() {
		q.Host = sluice.RequestHost(r.Host)
	}
	rules := rs.AppendMatchShadow(stack[:0], q)
	if len(rules) == 0 {
		return nil, algo.Decision{}
	}
	var rstack [maxStackRules]engine.Request
	reqs := rstack[:0]
	for _, c := range rules {
		key, cost, err := l.keyAndCost(r, c)
		if err != nil {
			if !errors.Is(err, identity.ErrBadIdentity) {
				l.log.Error("httplimit: cannot identify the caller for a shadow rule",
					"rule", c.Name(), "method", r.Method, "path", r.URL.Path, "err", err)
			}
			return nil, algo.Decision{}
		}
		reqs = append(reqs, engine.Request{Limit: c.Limit(), Key: key, Cost: cost})
	}
	Override(rs, rules, reqs) // rules is our own stack's
	start := time.Now()
	var one [1]algo.Decision
	ds, all, err := Decide(l.eng, reqs, &one)
	local := false
	if err != nil && isStoreError(err) {
		policy := sluice.FailOpen // a shadow rule never refuses
		if l.local != nil {
			policy = sluice.FailLocal
		}
		if l.metrics != nil {
			l.metrics.ObserveStoreError(rules[0].Name(), policy)
		}
		l.logStoreError(rules[0], err)
		if l.local == nil {
			return nil, algo.Decision{}
		}
		rules, reqs = l.local.Requests(rules, reqs)
		local = true
		ds, all, err = Decide(l.local.Engine(), reqs, &one)
	}
	if err != nil {
		l.log.Error("httplimit: cannot decide a shadow rule",
			"rule", rules[0].Name(), "method", r.Method, "path", r.URL.Path, "err", err)
		return nil, algo.Decision{}
	}
	elapsed := time.Since(start)
	for i, di := range ds {
		if l.metrics != nil {
			switch {
			case all:
				l.metrics.ObserveDecisionCost(rules[i].Name(), true, reqs[i].Cost, elapsed)
				if local {
					l.observeLocal(rules[i].Name(), true)
				}
			case !di.Allowed:
				if so, ok := l.metrics.(sluice.ShadowObserver); ok {
					so.ObserveShadowDenial(rules[i].Name(), reqs[i].Cost, elapsed)
				}
			}
		}
	}
	pick := PickShadow(ds)
	d := ds[pick]
	d.Allowed, d.RetryAfter, d.Delay = true, 0, 0 // the request passes, at once
	return rules[pick], d
}

// applyAll decides a request under several rules at once (all mode). It
// returns the rule and decision to report and the delay to wait; ok is
// false when it has answered the request (or passed it on) itself.
func (l *limiter) applyAll(w http.ResponseWriter, r *http.Request, next http.Handler, rs *sluice.Ruleset, rules []*sluice.CompiledRule) (rule *sluice.CompiledRule, d algo.Decision, delay time.Duration, ok bool) {
	var stack [maxStackRules]engine.Request
	reqs := stack[:0]
	kept := rules[:0:0]
	for _, c := range rules {
		key, cost, err := l.keyAndCost(r, c)
		if err != nil {
			l.identityError(w, r, c, err)
			return nil, d, 0, false
		}
		if l.exempt != nil && l.exempt(key) {
			continue // no rule limits this caller under c
		}
		kept = append(kept, c)
		reqs = append(reqs, engine.Request{Limit: c.Limit(), Key: key, Cost: cost})
	}
	if len(reqs) == 0 {
		next.ServeHTTP(w, r)
		return nil, d, 0, false
	}
	if len(kept) != len(rules) {
		rules = kept
	}
	Override(rs, rules, reqs) // rules is the door's own (AppendMatchPlan's), not the ruleset's
	start := time.Now()
	ds, all, err := l.eng.ApplyAll(reqs)
	local := false
	// A store error is counted under the rule of the request it concerns
	// (a Cluster slot's), else the most specific.
	at := 0
	var re *engine.RequestError
	if errors.As(err, &re) && re.Request < len(rules) {
		at = re.Request
	}
	if err != nil && l.local != nil && isStoreError(err) {
		// Decide every rule's share together on the local engine, and
		// report the shares. reqs and rules may be the caller's stack
		// arrays: they are replaced, not written to.
		l.storeError(rules[at], err)
		rules, reqs = l.local.Requests(rules, reqs)
		local = true
		ds, all, err = l.local.Engine().ApplyAll(reqs)
	}
	elapsed := time.Since(start)
	if err != nil {
		if local {
			l.localError(w, r, rules[0], err)
		} else {
			l.engineError(w, r, next, rs, rules[at], err)
		}
		return nil, d, 0, false
	}
	for i, di := range ds {
		if all {
			if l.metrics != nil {
				l.metrics.ObserveDecisionCost(rules[i].Name(), true, reqs[i].Cost, elapsed)
				if local {
					l.observeLocal(rules[i].Name(), true)
				}
			}
			delay = max(delay, di.Delay)
		} else if !di.Allowed && l.metrics != nil {
			l.metrics.ObserveDecisionCost(rules[i].Name(), false, reqs[i].Cost, elapsed)
			if local {
				l.observeLocal(rules[i].Name(), false)
			}
		}
	}
	pick := Pick(ds, all)
	d = ds[pick]
	if !all {
		d.Allowed = false // pick is a denying rule; be explicit all the same
	}
	return rules[pick], d, delay, true
}

// keyAndCost returns the caller's key under rule, and the cost of r. A
// panic in the IdentityFunc is returned as a *panicError.
func (l *limiter) keyAndCost(r *http.Request, rule *sluice.CompiledRule) (key string, cost int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			err = &panicError{value: v}
		}
	}()
	key, err = callerKey(l.id, l.identify, r, rule.Scope())
	if err != nil {
		return "", 0, err
	}
	if l.cost != nil {
		cost = l.cost(r, rule)
	}
	if cost <= 0 {
		cost = rule.Cost()
	}
	return key, cost, nil
}

// panicError is a panic recovered from the IdentityFunc or the Cost hook.
type panicError struct{ value any }

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// identityError answers a request whose key or cost could not be had.
func (l *limiter) identityError(w http.ResponseWriter, r *http.Request, rule *sluice.CompiledRule, err error) {
	if errors.Is(err, identity.ErrBadIdentity) {
		http.Error(w, "bad caller identity", http.StatusBadRequest)
		return
	}
	var pe *panicError
	if errors.As(err, &pe) {
		l.log.Error("httplimit: identity or cost function panicked; request refused",
			"rule", rule.Name(), "method", r.Method, "path", r.URL.Path, "panic", pe.value)
	} else {
		l.log.Error("httplimit: cannot identify the caller",
			"rule", rule.Name(), "method", r.Method, "path", r.URL.Path, "err", err)
	}
	http.Error(w, internalErrorBody, http.StatusInternalServerError)
}

// isStoreError reports an engine error that the store-error policy
// applies to.
func isStoreError(err error) bool {
	return errors.Is(err, engine.ErrStore) || errors.Is(err, engine.ErrClosed)
}

// engineError handles an error from the engine: a store error by the
// policy (open or closed: FailLocal has decided locally before this is
// called), anything else as an internal error.
func (l *limiter) engineError(w http.ResponseWriter, r *http.Request, next http.Handler, rs *sluice.Ruleset, rule *sluice.CompiledRule, err error) {
	if !isStoreError(err) {
		l.log.Error("httplimit: cannot decide the request",
			"rule", rule.Name(), "method", r.Method, "path", r.URL.Path, "err", err)
		http.Error(w, internalErrorBody, http.StatusInternalServerError)
		return
	}
	l.storeError(rule, err)
	if l.policy == sluice.FailClosed {
		unavailable(w)
		return
	}
	l.shadow(r, rs)
	next.ServeHTTP(w, r)
}

// unavailableRetry is the Retry-After of a 503 a store failure answers: a
// store that fails is retried at once, one call at a time (the breaker's
// probe), so the decision may work again in a second.
const unavailableRetry = "1"

// unavailable answers 503 for a store that cannot decide the request, with
// a Retry-After, as RFC 9110 suggests for a temporary condition.
func unavailable(w http.ResponseWriter) {
	w.Header().Set(headerRetryAfter, unavailableRetry)
	http.Error(w, unavailableBody, http.StatusServiceUnavailable)
}

// storeError counts and logs a store error under rule.
func (l *limiter) storeError(rule *sluice.CompiledRule, err error) {
	if l.metrics != nil {
		l.metrics.ObserveStoreError(rule.Name(), l.policy)
	}
	l.logStoreError(rule, err)
}

// localError answers a request that neither the store nor the local
// engine could decide: 503 when the local engine is closed, 500 for
// anything else.
func (l *limiter) localError(w http.ResponseWriter, r *http.Request, rule *sluice.CompiledRule, err error) {
	l.log.Error("httplimit: cannot decide the request locally either",
		"rule", rule.Name(), "method", r.Method, "path", r.URL.Path, "err", err)
	if isStoreError(err) {
		unavailable(w)
		return
	}
	http.Error(w, internalErrorBody, http.StatusInternalServerError)
}

// observeLocal tells Metrics of a local decision, when it listens for
// them.
func (l *limiter) observeLocal(rule string, allowed bool) {
	if lo, ok := l.metrics.(sluice.LocalObserver); ok {
		lo.ObserveLocalDecision(rule, allowed)
	}
}

// logStoreError logs a store error, at most one line a second; the line
// says how many were not logged since the previous one.
func (l *limiter) logStoreError(rule *sluice.CompiledRule, err error) {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < storeLogInterval || !l.lastLog.CompareAndSwap(last, now) {
		l.unlogged.Add(1)
		return
	}
	l.log.Warn("httplimit: rate limit store error",
		"rule", rule.Name(), "policy", string(l.policy), "err", err, "suppressed", l.unlogged.Swap(0))
}

// setHeaders sets the rate limit headers of a decision under rule (their
// values are sluice's: see sluice.CompiledRule.Policy), and for a denial
// Retry-After and the headers of its plain text body.
func (l *limiter) setHeaders(h http.Header, rule *sluice.CompiledRule, d algo.Decision) {
	xreset := sluice.ResetSeconds(d)
	if l.unix {
		xreset = (l.eng.Clock().Now() + int64(d.Reset) + int64(time.Second) - 1) / int64(time.Second)
	}
	// One buffer, one string, four substrings, the rule's policy: two
	// allocations in all.
	var buf [256]byte
	b := buf[:0]
	var ends [4]int
	b = strconv.AppendInt(b, d.Limit, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, d.Remaining, 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, xreset, 10)
	ends[2] = len(b)
	b = rule.AppendRateLimit(b, d)
	ends[3] = len(b)
	s := string(b)
	n := 5
	if !d.Allowed {
		n = 8
	}
	vals := make([]string, n)
	start := 0
	for i, e := range ends {
		vals[i] = s[start:e]
		start = e
	}
	vals[4] = rule.Policy()
	if !d.Allowed {
		vals[5] = strconv.FormatInt(sluice.RetryAfterSeconds(d), 10)
		vals[6] = "text/plain; charset=utf-8"
		vals[7] = "nosniff"
		h[headerRetryAfter] = vals[5:6:6]
		h["Content-Type"] = vals[6:7:7]
		h["X-Content-Type-Options"] = vals[7:8:8]
		delete(h, "Content-Length")
	}
	h[headerLimit] = vals[0:1:1]
	h[headerRemaining] = vals[1:2:2]
	h[headerReset] = vals[2:3:3]
	h[headerRateLimit] = vals[3:4:4]
	h[headerPolicy] = vals[4:5:5]
}

// problemBody answers a denial with an RFC 9457 problem details object:
// the rule, its quota, what is left and when to retry, beside the headers.
func (l *limiter) problemBody(w http.ResponseWriter, rule *sluice.CompiledRule, d algo.Decision) {
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	retry := sluice.RetryAfterSeconds(d)
	body, _ := json.Marshal(map[string]any{
		"type":        "about:blank",
		"title":       http.StatusText(l.deny),
		"status":      l.deny,
		"detail":      deniedBody + rule.Name(),
		"rule":        rule.Name(),
		"limit":       d.Limit,
		"remaining":   d.Remaining,
		"retry_after": retry,
	})
	w.WriteHeader(l.deny)
	w.Write(append(body, '\n'))
}
