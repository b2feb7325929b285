package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/clip"
)

// PerHandlerConfig configures the middleware PerHandler returns.
type PerHandlerConfig struct {
	// Limiter decides each request: its limit, window, algorithm and
	// store, and the name its rate-limit fields carry (sluice.WithName).
	// Required. Handlers may share one Limiter (one budget per key across
	// them) or each have their own.
	Limiter *sluice.Limiter
	// Key returns the key whose budget r spends: a user id from a
	// verified token, an API key, a tenant. nil means the client's IP
	// address as package identity keys it ("ip:192.0.2.1", IPv6 grouped
	// by a /64), from the connection's peer: no proxy is trusted. An
	// error is answered by OnError, 400 by default when it matches
	// identity.ErrBadIdentity. A key is often chosen by the client (a
	// header, a path segment): one longer than identity.MaxKeyLen bytes is
	// refused as identity.ErrBadIdentity, so no client makes the store
	// keep keys of any size.
	Key func(r *http.Request) (string, error)
	// Cost returns what r spends, at least 1 and at most the limiter's
	// capacity; nil means 1. An error (or a cost out of that range) is
	// answered by OnError.
	Cost func(r *http.Request) (int64, error)
	// Actual, when set, makes Cost an estimate, settled with the request's
	// actual cost once its handler has returned (as a rule's settle: see
	// sluice.Settle). The request is decided on the estimate (one above
	// the capacity is taken as the capacity); Actual then returns the
	// actual cost from what the handler left, header being the response's
	// (w.Header(), trailers included): a header such as X-Tokens-Used the
	// handler set. Above the estimate the difference is charged, even past
	// the limit (the caller is then denied until the debt has refilled);
	// below it, refunded where the algorithm can take it back exactly. ok
	// false, a negative cost, or a client gone before the end leave the
	// estimate standing. nil: Cost is final.
	Actual func(r *http.Request, header http.Header) (cost int64, ok bool)
	// OnStoreError is what happens to a request when the store fails:
	// sluice.FailOpen (the default when empty) lets it through without
	// rate-limit headers, sluice.FailClosed answers it through OnError
	// (503 by default). sluice.FailLocal is New's alone: PerHandler
	// refuses it.
	OnStoreError sluice.StoreErrorPolicy
	// OnDenied, when set, answers a denied request in place of the 429
	// with a one-line body; the rate-limit headers and Retry-After are
	// already set, and DecisionFrom gives it the decision (whatever
	// DecisionInContext says).
	OnDenied http.Handler
	// OnError, when set, answers a request that could not be decided: an
	// error of Key or Cost, or a store error under FailClosed (matching
	// engine.ErrStore or engine.ErrClosed). nil means 400 for
	// identity.ErrBadIdentity, 503 with a Retry-After for a store error,
	// and 500, logged, for the rest.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// Logger receives store errors under FailOpen and the errors the
	// default OnError answers 500; nil means slog.Default().
	Logger *slog.Logger
	// DecisionInContext, when true, puts each allowed request's decision
	// in the context its handler sees, for DecisionFrom. Changing a
	// request's context copies the request (about 300 ns and 400 bytes a
	// request on a 2-vCPU VM, half again the middleware's own cost), so it
	// is off by default: the decision is in the response's rate-limit
	// headers either way.
	DecisionInContext bool
}

// perHandler is the state behind one PerHandler middleware.
type perHandler struct {
	lim      *sluice.Limiter
	core     *sluice.Decider // decides over the limiter's engine and rule
	key      func(*http.Request) (string, error)
	cost     func(*http.Request) (int64, error)
	actual   func(*http.Request, http.Header) (int64, bool)
	onDenied http.Handler
	onError  func(http.ResponseWriter, *http.Request, error)
	inCtx    bool // DecisionInContext
	// fields writes the rate-limit headers as New's middleware does: it
	// is such a middleware's state, holding only what setHeaders reads.
	fields *limiter
	log    *slog.Logger
}

// PerHandler returns middleware limiting the handlers it wraps by one
// sluice.Limiter, each request spending Cost from the budget of its Key:
// the shape of go-limiter's and httprate's middleware, where New's is
// rules matched by method and path.
//
//	lim, _ := sluice.NewLimiter(100, time.Minute)
//	limit, _ := httplimit.PerHandler(httplimit.PerHandlerConfig{Limiter: lim})
//	mux.Handle("/search", limit(search))
//
// A decided request carries the same rate-limit fields New's middleware
// sends (X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset,
// RateLimit-Policy and RateLimit, named by the limiter), and with
// DecisionInContext the handler finds the decision with DecisionFrom. A
// denied one is answered 429 Too
// Many Requests with Retry-After (or by OnDenied). It fails when Limiter
// is missing or OnStoreError is not FailOpen or FailClosed.
func PerHandler(cfg PerHandlerConfig) (func(http.Handler) http.Handler, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("sluice/httplimit: PerHandlerConfig.Limiter is required")
	}
	p := &perHandler{
		lim: cfg.Limiter, key: cfg.Key, cost: cfg.Cost, actual: cfg.Actual,
		onDenied: cfg.OnDenied, onError: cfg.OnError, log: cfg.Logger, inCtx: cfg.DecisionInContext,
		fields: &limiter{clock: cfg.Limiter.Engine().Clock()},
	}
	switch cfg.OnStoreError {
	case "", sluice.FailOpen, sluice.FailClosed:
	default:
		return nil, fmt.Errorf("sluice/httplimit: PerHandlerConfig.OnStoreError %q: want %q or %q", cfg.OnStoreError, sluice.FailOpen, sluice.FailClosed)
	}
	if p.key == nil {
		id, err := identity.New(identity.Config{})
		if err != nil {
			return nil, err
		}
		p.key = func(r *http.Request) (string, error) {
			return callerKey(id, nil, r, sluice.ScopeIP)
		}
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	var err error
	p.core, err = sluice.NewDecider(sluice.DeciderConfig{Name: "sluice/httplimit", Engine: cfg.Limiter.Engine(), OnStoreError: cfg.OnStoreError, Logger: p.log})
	if err != nil {
		return nil, err
	}
	if p.onError == nil {
		p.onError = p.defaultError
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.serve(w, r, next)
		})
	}, nil
}

// serve decides r under the limiter and answers it.
func (p *perHandler) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key, err := p.key(r)
	if err == nil && len(key) > identity.MaxKeyLen {
		err = fmt.Errorf("%w: a key of %d bytes, over %d", identity.ErrBadIdentity, len(key), identity.MaxKeyLen)
	}
	if err != nil {
		p.onError(w, r, fmt.Errorf("sluice/httplimit: key: %w", err))
		return
	}
	// The limiter's one rule, decided as every door decides (the Decider
	// counts and logs a store error, at most a line a second).
	rule := p.lim.Rule()
	cost := int64(1)
	if p.cost != nil {
		if cost, err = p.cost(r); err == nil {
			if p.actual != nil {
				// An estimate: one above the capacity could never pass,
				// and the settle charges the rest.
				cost = min(cost, rule.Limit().Algorithm.Params().Capacity())
			}
			// A cost out of range is often the client's choosing:
			// answered by OnError here, before the Decider, which logs
			// what it cannot decide; only the default OnError logs it
			// (Logger).
			err = algo.CheckCost(rule.Limit().Algorithm, cost)
		}
		if err != nil {
			p.onError(w, r, fmt.Errorf("sluice/httplimit: cost: %w", err))
			return
		}
	}
	var reserve []engine.Reservation
	if p.actual != nil {
		reserve = make([]engine.Reservation, 1)
	}
	rules := [1]*sluice.CompiledRule{rule}
	reqs := [1]engine.Request{{Limit: rule.Limit(), Key: key, Cost: cost}}
	var scratch sluice.Scratch
	res, _, err := p.core.Decide(r.Context(), sluice.Batch{Rules: rules[:], Reserve: reserve}, reqs[:], &scratch)
	if err != nil {
		if p.core.ErrVerdict(r.Context(), err) == sluice.Passed { // FailOpen
			next.ServeHTTP(w, r)
			return
		}
		p.onError(w, r, err)
		return
	}
	d := res.Decisions[0]
	p.fields.setHeaders(w.Header(), rule, d)
	if !d.Allowed {
		if p.onDenied != nil {
			p.onDenied.ServeHTTP(w, withDecision(r, rule, d))
			return
		}
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, deniedBody+rule.Name()+"\n")
		return
	}
	if p.inCtx {
		r = withDecision(r, rule, d)
	}
	if reserve != nil {
		// Deferred, so that a handler that aborts the response is
		// settled too; a client gone while waiting leaves the estimate.
		defer p.settle(w, r, &reserve[0])
	}
	if d.Delay > 0 && !sluice.WaitDelay(r.Context(), d.Delay) {
		return // the client went away while waiting
	}
	next.ServeHTTP(w, r)
}

// settle settles res, the request's reservation, with the actual cost
// Actual finds once the handler has returned; a client gone, or no actual
// cost, leaves the estimate standing.
func (p *perHandler) settle(w http.ResponseWriter, r *http.Request, res *engine.Reservation) {
	name := p.lim.Rule().Name()
	if r.Context().Err() != nil {
		p.core.Unsettled(name)
		return
	}
	n, ok := p.actual(r, w.Header())
	if !ok || n < 0 {
		p.core.Unsettled(name)
		return
	}
	p.core.Settle(context.WithoutCancel(r.Context()), name, res, n)
}

// defaultError is OnError when none is set.
func (p *perHandler) defaultError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, identity.ErrBadIdentity):
		http.Error(w, "bad caller identity", http.StatusBadRequest)
	case engine.IsStoreError(err):
		unavailable(w)
	default:
		p.log.Error("sluice/httplimit: cannot decide the request", "limiter", p.lim.Rule().Name(),
			"method", clip.String(r.Method, clip.Max), "path", clip.String(r.URL.Path, clip.Max),
			"err", clip.String(err.Error(), maxLoggedError))
		http.Error(w, internalErrorBody, http.StatusInternalServerError)
	}
}

// Decision is the rate-limit decision a request was answered with, as a
// handler finds it with DecisionFrom: the answer (Allowed, Limit,
// Remaining, Reset and, on a denial, RetryAfter) and the rule that decided
// (New's matching rule, the one the headers report, in all mode the most
// restrictive; or PerHandler's limiter's Rule). It is the decision every
// door puts in a handler's context, gRPC's too.
type Decision = sluice.RuleDecision

// withDecision returns r with rule's decision d in its context.
func withDecision(r *http.Request, rule *sluice.CompiledRule, d algo.Decision) *http.Request {
	return r.WithContext(sluice.WithDecision(r.Context(), rule, d))
}

// DecisionFrom returns the rate-limit decision of the request whose
// context ctx is (or derives from), as New's middleware made it with
// Config.DecisionInContext, or PerHandler with
// PerHandlerConfig.DecisionInContext (and for its OnDenied): a handler
// reads what the caller has left (Remaining) and when the budget is whole
// again (Reset). ok is false for a request no rule decided (none covered
// it, or the store failed and it was let through), and for an allowed
// request under a middleware without DecisionInContext.
func DecisionFrom(ctx context.Context) (d Decision, ok bool) {
	return sluice.DecisionFromContext(ctx)
}
