package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/clip"
	"github.com/sluice-go/sluice/internal/ratefield"
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
	// (package metrics' *Metrics counts them for Prometheus, package
	// sluiceotel's *Observer through OpenTelemetry, with an event on the
	// request's span).
	Metrics sluice.Observer
	// OnStoreError is what happens to a request when the store fails:
	// sluice.FailOpen (the default when empty) lets it through,
	// sluice.FailClosed answers 503 Service Unavailable, sluice.FailLocal
	// decides it with Local instead.
	OnStoreError sluice.StoreErrorPolicy
	// Local decides the requests the store could not, under sluice.FailLocal:
	// on its in-process engine, under each rule's share of the fleet
	// (sluice.LocalFallback). Required with FailLocal, ignored otherwise. Keep
	// one LocalFallback across the middlewares a program builds on reloads, so
	// that what callers spent locally carries over.
	Local *sluice.LocalFallback
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
	// DecisionInContext, when true, puts each allowed request's decision
	// in the context its handler sees, for DecisionFrom. Changing a
	// request's context copies the request (about 300 ns and 400 bytes a
	// request on a 2-vCPU VM, half again the middleware's own cost), so it
	// is off by default: the decision is in the response's rate-limit
	// headers either way.
	DecisionInContext bool
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
	// Watch, when not nil, is told of each rule's decision that denied a
	// caller or left it near its limit (sluice.Watcher): package
	// throttled's Tracker keeps a bounded live list of them.
	Watch sluice.Watcher

	// wait, when set (by tests), replaces sluice.WaitDelay.
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
	unavailableBody   = "rate limiter unavailable"
	deniedBody        = "rate limit exceeded for rule "
	internalErrorBody = "internal server error"
)

// limiter is the state behind one middleware: the decision, a
// sluice.Door, and what reading a request and answering it take.
type limiter struct {
	door     *sluice.Door[*http.Request]
	reg      *sluice.Registry
	id       *identity.Identifier
	identify IdentityFunc
	cost     func(*http.Request, *sluice.CompiledRule) int64
	clock    engine.Clock // the engine's, for ResetAsUnixTime
	shadowH  bool         // ShadowHeaders
	deny     int          // DenyStatus
	problem  bool         // ProblemDetails
	inCtx    bool         // DecisionInContext
	unix     bool         // ResetAsUnixTime
	log      *slog.Logger
	wait     func(context.Context, time.Duration) bool
}

// New returns rate-limiting middleware of the shape net/http, chi and most
// routers take: func(http.Handler) http.Handler. It fails when Engine or
// Registry is missing or OnStoreError is not a known policy.
//
// For each request it matches the rules in force (sluice.Door). A
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
// seconds: Retry-After on a denial). The handler of an allowed request
// finds the decision with DecisionFrom.
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
	l, err := newLimiter(cfg)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.serve(w, r, next)
		})
	}, nil
}

// newLimiter returns the state behind New's middleware (and NewUsage's
// reader) for cfg, or New's errors.
func newLimiter(cfg Config) (*limiter, error) {
	l := &limiter{
		reg:      cfg.Registry,
		id:       cfg.Identifier,
		identify: cfg.Identity,
		cost:     cfg.Cost,
		shadowH:  cfg.ShadowHeaders,
		inCtx:    cfg.DecisionInContext,
		deny:     cfg.DenyStatus,
		problem:  cfg.ProblemDetails,
		unix:     cfg.ResetAsUnixTime,
		log:      cfg.Logger,
		wait:     cfg.wait,
	}
	var err error
	l.door, err = sluice.NewDoor(sluice.DoorConfig[*http.Request]{
		Name:         "sluice/httplimit",
		Engine:       cfg.Engine,
		Key:          l.key,  // caller.go
		Plan:         l.plan, // plan.go
		Host:         func(r *http.Request) string { return r.Host },
		Exempt:       cfg.Exempt,
		Metrics:      cfg.Metrics,
		OnStoreError: cfg.OnStoreError,
		Local:        cfg.Local,
		Logger:       cfg.Logger,
		Watch:        cfg.Watch,
	})
	if err != nil {
		return nil, err
	}
	l.clock = cfg.Engine.Clock()
	if l.reg == nil {
		return nil, errors.New("sluice/httplimit: Config.Registry is required")
	}
	switch {
	case l.deny == 0:
		l.deny = http.StatusTooManyRequests
	case l.deny < 400 || l.deny > 599:
		return nil, fmt.Errorf("sluice/httplimit: Config.DenyStatus %d: want a client or server error status, 400 to 599", l.deny)
	}
	if l.id == nil {
		if l.id, err = identity.New(identity.Config{}); err != nil {
			return nil, err
		}
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.wait == nil {
		l.wait = sluice.WaitDelay
	}
	return l, nil
}

// serve decides r and answers it from the outcome: the request reaches
// next, with the rate limit headers when a rule decided it, or is refused.
func (l *limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	out := l.door.Decide(r.Context(), l.reg.Ruleset(), r.Method, r.URL.Path, r)
	if out.ShadowErr != nil {
		l.shadowError(r, out.ShadowErr)
	}
	switch out.Verdict {
	case sluice.Unlimited:
		if out.Shadow != nil && l.shadowH {
			l.setHeaders(w.Header(), out.Shadow, out.ShadowDecision)
		}
	case sluice.Passed:
	case sluice.Allowed:
		if out.Held != nil {
			// Deferred, so that the slots come back when the handler
			// returns, aborts the response, or the client goes away
			// while the request waits its delay.
			defer l.door.Release(r.Context(), out.Held)
		}
		l.setHeaders(w.Header(), out.Rule, out.Decision)
		if l.inCtx {
			r = withDecision(r, out.Rule, out.Decision) // perhandler.go: DecisionFrom
		}
		if out.Delay > 0 && !l.wait(r.Context(), out.Delay) {
			return // the client went away while waiting
		}
		if out.Reserved != nil { // settle.go
			sw := newSettleWriter(w, out.Reserved)
			// Deferred, so that a handler that aborts the response (as
			// httputil.ReverseProxy does, panicking with
			// http.ErrAbortHandler, when its client or upstream goes away
			// mid-body) is settled too.
			defer sw.finish(r.Context(), l.door, &out)
			next.ServeHTTP(sw, r)
			return
		}
	case sluice.Denied:
		l.setHeaders(w.Header(), out.Rule, out.Decision)
		if l.problem {
			l.problemBody(w, out.Rule, out.Decision)
			return
		}
		// As http.Error would, with fewer allocations.
		w.WriteHeader(l.deny)
		io.WriteString(w, deniedBody+out.Rule.Name()+"\n")
		return
	case sluice.Unidentified:
		body, status := l.callerError(r, out.Err)
		http.Error(w, body, status)
		return
	case sluice.Unavailable:
		unavailable(w)
		return
	default: // sluice.Failed, logged by the Door
		http.Error(w, internalErrorBody, http.StatusInternalServerError)
		return
	}
	next.ServeHTTP(w, r)
}

// maxLoggedError bounds the bytes of an error (or a panic's value) a log
// line quotes: an IdentityFunc's error may quote the request. The method
// and the path are quoted up to clip.Max bytes, so a log line about a
// request costs a few hundred bytes whatever the client sent.
const maxLoggedError = 512

// callerError returns the body and status that answer a request whose
// caller (its key, its plan) or cost could not be had, err being the
// Door's *sluice.KeyError: 400 for a bad identity
// (identity.ErrBadIdentity), else 500 and logged, as a panic of the
// IdentityFunc or the Cost function is. A panic with http.ErrAbortHandler
// is not contained: it goes on up, to abort the request as net/http does.
func (l *limiter) callerError(r *http.Request, err error) (string, int) {
	repanicAbort(err)
	if errors.Is(err, identity.ErrBadIdentity) {
		return "bad caller identity", http.StatusBadRequest
	}
	if errors.Is(err, ErrBodyTooLarge) {
		return "request body too large", http.StatusRequestEntityTooLarge
	}
	var ke *sluice.KeyError
	errors.As(err, &ke)
	attrs := []any{"method", clip.String(r.Method, clip.Max), "path", clip.String(r.URL.Path, clip.Max)}
	what, panicked := "cannot find the caller's plan", "identity function panicked"
	if ke != nil && ke.Rule != nil {
		attrs = append(attrs, "rule", ke.Rule.Name())
		what, panicked = "cannot identify the caller", "identity or cost function panicked"
	}
	if pe := (*sluice.PanicError)(nil); errors.As(err, &pe) {
		l.log.Error("sluice/httplimit: "+panicked+"; request refused", append(attrs, "panic", clip.String(fmt.Sprint(pe.Value), maxLoggedError))...)
	} else {
		l.log.Error("sluice/httplimit: "+what, append(attrs, "err", clip.String(err.Error(), maxLoggedError))...)
	}
	return internalErrorBody, http.StatusInternalServerError
}

// shadowError logs why a shadow rule could not key the caller, unless it
// is the client's doing (a bad identity); the request goes on.
func (l *limiter) shadowError(r *http.Request, ke *sluice.KeyError) {
	repanicAbort(ke)
	if !errors.Is(ke, identity.ErrBadIdentity) {
		l.log.Error("sluice/httplimit: cannot identify the caller for a shadow rule",
			"rule", ke.Rule.Name(), "method", clip.String(r.Method, clip.Max), "path", clip.String(r.URL.Path, clip.Max),
			"err", clip.String(ke.Err.Error(), maxLoggedError))
	}
}

// repanicAbort panics again with http.ErrAbortHandler when err is the
// Door's containment of that panic.
func repanicAbort(err error) {
	if pe := (*sluice.PanicError)(nil); errors.As(err, &pe) && pe.Value == http.ErrAbortHandler {
		panic(http.ErrAbortHandler)
	}
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

// setHeaders sets the rate limit headers of a decision under rule (their
// values are package internal/ratefield's, as every door sends them), and
// for a denial Retry-After and the headers of its plain text body.
func (l *limiter) setHeaders(h http.Header, rule *sluice.CompiledRule, d algo.Decision) {
	p := rule.FieldPolicy()
	set := p.Of(d)
	if l.unix {
		set.Reset = (l.clock.Now() + int64(d.Reset) + int64(time.Second) - 1) / int64(time.Second)
	}
	// One buffer, one string, its substrings, the rule's policy: two
	// allocations in all.
	var buf [256]byte
	b, ends := p.Append(buf[:0], &set)
	v := ends.Cut(string(b))
	n := 5
	if !d.Allowed {
		n = 8
	}
	// vals: X-RateLimit-Limit, -Remaining, -Reset, RateLimit (ratefield's
	// order), RateLimit-Policy, and a denial's three.
	vals := make([]string, n)
	copy(vals, v[:ratefield.RetryAfter])
	vals[4] = p.Field
	if !d.Allowed {
		vals[5] = v[ratefield.RetryAfter]
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
