package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// Config configures the Limiter New returns.
type Config struct {
	// Engine decides and records calls. Required.
	Engine *engine.Engine
	// Registry holds the rules in force; it is read once per call (once
	// per stream, when it opens), so a reload (Registry.Swap) takes effect
	// from the next call on. Required.
	Registry *sluice.Registry
	// Identifier turns a call into the key a rule counts it under; nil
	// means identity.New(identity.Config{}). Its user and API key header
	// names are the request metadata keys read, case-insensitively: by
	// default x-user-id and x-api-key. Its trusted proxies say whose
	// x-forwarded-for (or forwarded) metadata is believed. Read
	// identity.Identifier before trusting identity metadata.
	Identifier *identity.Identifier
	// Identity, when set, supplies the caller's identity in place of the
	// user and API key metadata. See IdentityFunc.
	Identity IdentityFunc
	// Metrics, when not nil, is told every decision and store error
	// (package metrics' *Metrics counts them for Prometheus).
	Metrics sluice.Observer
	// OnStoreError is what happens to a call when the store fails:
	// sluice.FailOpen (the default when empty) lets it through,
	// sluice.FailClosed ends it with codes.Unavailable, sluice.FailLocal
	// decides it with Local instead.
	OnStoreError sluice.StoreErrorPolicy
	// Local decides the calls the store could not, under sluice.FailLocal:
	// on its in-process engine, under each rule's share of the fleet
	// (sluice.Local). Required with FailLocal, ignored otherwise.
	Local *sluice.Local
	// Cost, when set, returns what a call spends under a rule; a result of
	// zero or less means the rule's own cost. When nil every call spends
	// its rule's Cost. A cost above the rule's capacity could never be
	// allowed: such a call ends with codes.Internal and is logged, as a
	// configuration error.
	Cost func(ctx context.Context, fullMethod string, rule *sluice.CompiledRule) int64
	// ShadowMetadata, when true, sends the rate-limit fields of a shadow
	// rule's decision on a call that no enforced rule covers (never
	// retry-after: the call passes). False by default: a shadow rule is
	// invisible to clients.
	ShadowMetadata bool
	// DenialMetadataOnly, when true, sends the rate-limit metadata on
	// denied calls only: an allowed call goes without it. Building the
	// metadata is most of what an allowed call costs the interceptor, and
	// many clients read it only from a refusal. False by default: every
	// limited call carries it, as every limited HTTP response carries the
	// headers.
	DenialMetadataOnly bool
	// Logger receives store errors (at most one line a second), contained
	// panics of the IdentityFunc and Cost, and other internal errors; nil
	// means slog.Default().
	Logger *slog.Logger

	// wait, when set (by tests), replaces waitDelay.
	wait func(ctx context.Context, d time.Duration) bool
}

// The response metadata keys a decision sets: the IETF draft fields and
// the X-RateLimit-* ones, as package httplimit sends them, in lower case.
const (
	MetadataLimit      = "x-ratelimit-limit"
	MetadataRemaining  = "x-ratelimit-remaining"
	MetadataReset      = "x-ratelimit-reset"
	MetadataPolicy     = "ratelimit-policy"
	MetadataRateLimit  = "ratelimit"
	MetadataRetryAfter = "retry-after"
)

const (
	maxStackRules    = 8
	storeLogInterval = int64(time.Second)
	deniedMessage    = "rate limit exceeded for rule "
	unavailable      = "rate limiter unavailable"
)

// Limiter rate-limits the calls of a gRPC server: UnaryServerInterceptor
// and StreamServerInterceptor return its interceptors, and Limit is the
// one method of go-grpc-middleware v2's ratelimit.Limiter, for programs
// that chain that package's interceptors. Make one with New. A Limiter is
// safe for concurrent use, and keeps no state of its own between calls
// but its store-error log's pace: the rules are the Registry's, the
// budgets the Engine's.
type Limiter struct {
	eng      *engine.Engine
	reg      *sluice.Registry
	id       *identity.Identifier
	identify IdentityFunc
	metrics  sluice.Observer // nil: nothing observes
	policy   sluice.StoreErrorPolicy
	local    *sluice.Local // with policy FailLocal
	cost     func(context.Context, string, *sluice.CompiledRule) int64
	shadowMD bool
	denialMD bool // DenialMetadataOnly
	log      *slog.Logger
	wait     func(context.Context, time.Duration) bool
	infos    infoCache     // what each rule's decisions send, worked out once
	lastLog  atomic.Int64  // Unix ns of the last store error logged
	unlogged atomic.Uint64 // store errors not logged since
}

// New returns a Limiter. It fails when Engine or Registry is missing or
// OnStoreError is not a known policy (or is FailLocal without Local).
//
// # Which rules
//
// A call is matched by its full method name, "/pkg.Service/Method", taken
// as the path: a rule's path_prefix "/pkg.Service/" covers a service,
// "/pkg.Service/Method" one method, "/" everything. gRPC has no HTTP
// method to match: only rules whose method is "*" (or empty, which means
// "*") cover gRPC calls. A rule naming an HTTP method (GET, POST, …) is an
// HTTP rule, which no gRPC call matches, so one configuration can serve
// both doors. The match mode and the default are the Ruleset's: one rule
// (most_specific) or all of them together (all, engine.ApplyAll: nothing is
// spent unless every one allows, and the call reports the most restrictive
// decision, as package httplimit does). A call no rule covers passes
// untouched, without metadata. Rules with a plan apply to that plan's
// callers, and a caller's override replaces its rule's limit, as in
// package httplimit: see plan.go.
//
// # What a decision sends
//
// The response header metadata of every limited call, allowed or denied
// (denied only, with Config.DenialMetadataOnly), carries the fields package httplimit sends as headers, in lower case:
// x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset (seconds
// until the full capacity is back, rounded up), ratelimit-policy
// ("orders";q=5;w=60) and ratelimit ("orders";r=3;t=24). A denied call ends
// with codes.ResourceExhausted, the message "rate limit exceeded for rule
// NAME", and two details: a google.rpc.RetryInfo whose retry_delay is the
// decision's exact RetryAfter, and a google.rpc.QuotaFailure naming the
// rule; its metadata adds retry-after, in whole seconds rounded up, at
// least 1. An allowed leaky-bucket call waits its Delay before it reaches
// the handler; when the call's context ends first, the call ends with the
// context's status (the cost stays spent).
//
// A stream is decided once, when it opens, as one call: its messages are
// not counted. A denied stream ends before the handler runs.
//
// # Identity and errors
//
// The caller's key comes from package identity (see Config.Identifier and
// IdentityFunc): the user id or API key from the request metadata, the
// peer's address (the client named by x-forwarded-for when the peer is a
// trusted proxy), or one key for everyone. A bad identity
// (identity.ErrBadIdentity: a user id over identity.MaxUserIDLen, an
// identity key sent twice) ends the call with codes.InvalidArgument; see
// IdentityFunc for its errors. A call without a TCP peer under an ip rule
// (or an anonymous one under a user or api_key rule) cannot be keyed and
// ends with codes.Internal, logged.
//
// A store error (engine.ErrStore, or engine.ErrClosed) follows
// OnStoreError as in package httplimit: FailOpen passes the call without
// metadata, FailClosed ends it with codes.Unavailable, FailLocal decides
// it on Config.Local's engine under the rules' shares; each is logged (at
// most one line a second) and counted with Metrics.ObserveStoreError.
//
// # Shadow rules
//
// A shadow rule (sluice.Rule.Shadow) is decided and spent like any other,
// but never denies: its would-be denial is counted
// (sluice.ShadowObserver, sluice_shadow_denials_total in package metrics)
// and the call goes on. Shadow rules are matched apart from the enforced
// ones (sluice.Ruleset.MatchShadow), so they never change what those
// decide, and they are decided only for a call the enforced rules let
// through (a refused call spends nothing, under any rule). Several shadow
// rules of one call (all mode) are decided together, as enforced ones are.
// A store error under a shadow rule never refuses the call: it is counted
// under FailOpen, or under FailLocal the rule is decided locally. A shadow
// decision sends no metadata unless Config.ShadowMetadata is set.
func New(cfg Config) (*Limiter, error) {
	switch {
	case cfg.Engine == nil:
		return nil, errors.New("grpclimit: Config.Engine is required")
	case cfg.Registry == nil:
		return nil, errors.New("grpclimit: Config.Registry is required")
	}
	l := &Limiter{
		eng:      cfg.Engine,
		reg:      cfg.Registry,
		id:       cfg.Identifier,
		identify: cfg.Identity,
		metrics:  cfg.Metrics,
		policy:   cfg.OnStoreError,
		local:    cfg.Local,
		cost:     cfg.Cost,
		shadowMD: cfg.ShadowMetadata,
		denialMD: cfg.DenialMetadataOnly,
		log:      cfg.Logger,
		wait:     cfg.wait,
	}
	if l.id == nil {
		var err error
		if l.id, err = identity.New(identity.Config{}); err != nil {
			return nil, err
		}
	}
	var err error
	if l.policy, l.local, err = sluice.DoorPolicy("grpclimit", l.policy, l.local); err != nil {
		return nil, err
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.wait == nil {
		l.wait = waitDelay
	}
	return l, nil
}

// UnaryServerInterceptor returns the interceptor that limits unary calls,
// for grpc.UnaryInterceptor or grpc.ChainUnaryInterceptor.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, delay, err := l.decide(ctx, info.FullMethod)
		if md != nil {
			grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		if delay > 0 && !l.wait(ctx, delay) {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns the interceptor that limits streams, for
// grpc.StreamInterceptor or grpc.ChainStreamInterceptor: each stream is
// decided once, as one call, when it opens.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		md, delay, err := l.decide(ctx, info.FullMethod)
		if md != nil {
			ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		if delay > 0 && !l.wait(ctx, delay) {
			return status.FromContextError(ctx.Err()).Err()
		}
		return handler(srv, ss)
	}
}

// Limit decides the call of ctx, a server call's context (the method is
// grpc.Method(ctx)), as the interceptors do: it sets the same response
// metadata (grpc.SetHeader) and waits a leaky bucket's delay, and returns
// nil to let the call through or the status error the interceptors would
// end it with.
//
// It is go-grpc-middleware v2's ratelimit.Limiter, which *Limiter
// satisfies, so that a program chaining that package's interceptors can
// pass a *Limiter to ratelimit.UnaryServerInterceptor and
// StreamServerInterceptor. That package ends a call Limit refuses with
// codes.ResourceExhausted and a message quoting the error's text: the
// RetryInfo detail does not travel, and a refusal under FailClosed or
// of a bad identity arrives as ResourceExhausted too. The metadata,
// retry-after included, still does. Use the Limiter's own interceptors for
// the status as this package documents it.
func (l *Limiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	md, delay, err := l.decide(ctx, method)
	if md != nil {
		grpc.SetHeader(ctx, md)
	}
	if err != nil {
		return err
	}
	if delay > 0 && !l.wait(ctx, delay) {
		return status.FromContextError(ctx.Err()).Err()
	}
	return nil
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

// decide decides a call of the given method. It returns the response
// metadata to set (nil for none), the delay to wait before the handler,
// and the status error to end the call with (nil to let it through).
func (l *Limiter) decide(ctx context.Context, method string) (metadata.MD, time.Duration, error) {
	rs := l.reg.Ruleset()
	var plan string
	if rs.HasPlans() { // plan.go
		var err error
		if plan, err = l.callerPlan(ctx, method); err != nil {
			return nil, 0, l.planError(method, err)
		}
	}
	var stack [maxStackRules]*sluice.CompiledRule
	// gRPC calls have no HTTP method: "" matches the rules of AnyMethod
	// only. The host is the call's :authority.
	q := sluice.Shape{Path: method, Plan: plan}
	if rs.HasHostRules() {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if a := md.Get(":authority"); len(a) > 0 {
				q.Host = sluice.RequestHost(a[0])
			}
		}
	}
	rules := rs.AppendMatch(stack[:0], q)
	var (
		rule  *sluice.CompiledRule // the decision to report; nil for none
		d     algo.Decision
		delay time.Duration
	)
	if len(rules) > 0 {
		var err error
		var passed bool
		rule, d, delay, passed, err = l.apply(ctx, rs, method, rules, false)
		if err != nil {
			return nil, 0, err
		}
		if passed { // a store error under FailOpen: no decision to report
			rule = nil
		} else if !d.Allowed {
			ri := l.infos.get(rs, rule)
			return decisionMD(ri, rule, d), 0, denial(ri, d)
		}
	}
	if rs.HasShadow() {
		var sstack [maxStackRules]*sluice.CompiledRule
		if shadows := rs.AppendMatchShadow(sstack[:0], q); len(shadows) > 0 {
			srule, sd, _, passed, err := l.apply(ctx, rs, method, shadows, true)
			if err != nil {
				return nil, 0, err
			}
			if len(rules) == 0 && l.shadowMD && !passed {
				sd.Allowed, sd.RetryAfter = true, 0 // the call passes
				rule, d = srule, sd
			}
		}
	}
	if rule == nil || l.denialMD {
		return nil, delay, nil
	}
	return decisionMD(l.infos.get(rs, rule), rule, d), delay, nil
}

// apply decides a call under rules, all enforced or all shadow. It returns
// the rule and the decision to report, and the delay to wait; passed is
// true when a store error let the call through undecided (FailOpen, or any
// store error under a shadow rule but for FailLocal). err is the status to
// end the call with: never a denial, which is d.Allowed false. A shadow
// rule's denial is returned as a denial for the caller to report; it is
// counted as a would-be denial here. Each rule of rules (the caller's
// own slice) is replaced by the caller's override under it, if any, once
// its key is known.
func (l *Limiter) apply(ctx context.Context, rs *sluice.Ruleset, method string, rules []*sluice.CompiledRule, shadow bool) (rule *sluice.CompiledRule, d algo.Decision, delay time.Duration, passed bool, err error) {
	var stack [maxStackRules]engine.Request
	reqs := stack[:0]
	for i, c := range rules {
		key, cost, err := l.keyAndCost(ctx, method, c)
		if err != nil {
			if shadow {
				// A shadow rule that cannot key the call is no reason to
				// refuse it: the call goes on (what is not the client's
				// fault is logged).
				if !errors.Is(err, identity.ErrBadIdentity) {
					l.identityError(method, c, err)
				}
				return nil, d, 0, true, nil
			}
			return nil, d, 0, false, l.identityError(method, c, err)
		}
		if o := rs.Override(c, key); o != c {
			rules[i], c = o, o
		}
		reqs = append(reqs, engine.Request{Limit: c.Limit(), Key: key, Cost: cost})
	}
	var start time.Time
	if l.metrics != nil {
		start = time.Now()
	}
	var ds []algo.Decision
	var one [1]algo.Decision
	all := true
	if len(reqs) == 1 {
		one[0], err = l.eng.Apply(reqs[0].Limit, reqs[0].Key, reqs[0].Cost)
		ds, all = one[:], one[0].Allowed
	} else {
		ds, all, err = l.eng.ApplyAll(reqs)
	}
	local := false
	if err != nil && isStoreError(err) {
		l.storeError(rules[0], err, shadow)
		if l.local == nil {
			if shadow || l.policy == sluice.FailOpen {
				return nil, d, 0, true, nil
			}
			return nil, d, 0, false, status.Error(codes.Unavailable, unavailable)
		}
		// Decide every rule's share on the local engine, and report the
		// shares. reqs and rules may be the caller's stack arrays: they are
		// replaced, not written to.
		rules, reqs = l.local.Requests(rules, reqs)
		local = true
		if len(reqs) == 1 {
			one[0], err = l.local.Engine().Apply(reqs[0].Limit, reqs[0].Key, reqs[0].Cost)
			ds, all = one[:], one[0].Allowed
		} else {
			ds, all, err = l.local.Engine().ApplyAll(reqs)
		}
	}
	var elapsed time.Duration
	if l.metrics != nil {
		elapsed = time.Since(start)
	}
	if err != nil {
		l.log.Error("grpclimit: cannot decide the call",
			"rule", rules[0].Name(), "method", method, "local", local, "shadow", shadow, "err", err)
		if shadow {
			return nil, d, 0, true, nil
		}
		if isStoreError(err) { // the local engine failed too: it is closed
			return nil, d, 0, false, status.Error(codes.Unavailable, unavailable)
		}
		return nil, d, 0, false, status.Error(codes.Internal, "rate limiter error")
	}
	pick := -1
	for i, di := range ds {
		if l.metrics != nil {
			l.observe(rules[i].Name(), all, di.Allowed, reqs[i].Cost, elapsed, local, shadow)
		}
		if all {
			delay = max(delay, di.Delay)
		}
		switch {
		case pick < 0:
			pick = i
		case !all:
			// The denying rule with the longest wait.
			if !di.Allowed && (ds[pick].Allowed || di.RetryAfter > ds[pick].RetryAfter) {
				pick = i
			}
		case di.Remaining < ds[pick].Remaining:
			pick = i
		}
	}
	d = ds[pick]
	if !all {
		d.Allowed = false // pick is a denying rule; be explicit all the same
	}
	return rules[pick], d, delay, false, nil
}

// observe tells Metrics of one rule's decision in a call decided all
// together (all: whether every rule allowed). When one rule denies, the
// denying rules are counted and the others, which spent nothing, are not;
// a shadow rule's denial is a would-be denial.
func (l *Limiter) observe(rule string, all, allowed bool, cost int64, elapsed time.Duration, local, shadow bool) {
	switch {
	case all:
		l.metrics.ObserveDecisionCost(rule, true, cost, elapsed)
	case allowed:
		return
	case shadow:
		// Not a decision that took effect: neither a denial nor a local
		// one.
		if so, ok := l.metrics.(sluice.ShadowObserver); ok {
			so.ObserveShadowDenial(rule, cost, elapsed)
		}
		return
	default:
		l.metrics.ObserveDecisionCost(rule, false, cost, elapsed)
	}
	if local {
		if lo, ok := l.metrics.(sluice.LocalObserver); ok {
			lo.ObserveLocalDecision(rule, all)
		}
	}
}

// keyAndCost returns the caller's key under rule, and the call's cost. A
// panic in the IdentityFunc or the Cost hook is returned as a
// *panicError.
func (l *Limiter) keyAndCost(ctx context.Context, method string, rule *sluice.CompiledRule) (key string, cost int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v}
		}
	}()
	key, err = callerKey(ctx, l.id, l.identify, method, rule.Scope())
	if err != nil {
		return "", 0, err
	}
	if l.cost != nil {
		cost = l.cost(ctx, method, rule)
	}
	if cost <= 0 {
		cost = rule.Cost()
	}
	return key, cost, nil
}

// panicError is a panic recovered from the IdentityFunc or the Cost hook.
type panicError struct{ value any }

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// identityError returns the status of a call whose key or cost could not
// be had, and logs what is not the client's fault.
func (l *Limiter) identityError(method string, rule *sluice.CompiledRule, err error) error {
	return l.callerError(err, "cannot identify the caller", "identity or cost function panicked", "rule", rule.Name(), "method", method)
}

// grpcKeyNames lower-cases the header names in msg that follow "once: ",
// as gRPC metadata keys are.
func grpcKeyNames(msg string) string {
	if before, name, ok := strings.Cut(msg, "once: "); ok {
		return before + "once: " + strings.ToLower(name)
	}
	return msg
}

// callerError returns the status of a call refused because the caller
// could not be identified: the status an IdentityFunc returned,
// InvalidArgument for a malformed identity, and otherwise Internal, logged
// as failed (or as panicked, for a recovered panic) with attrs.
func (l *Limiter) callerError(err error, failed, panicked string, attrs ...any) error {
	var fe *identityFuncError
	if errors.As(err, &fe) {
		if st, ok := status.FromError(fe.err); ok && st.Code() != codes.Unknown {
			return st.Err()
		}
	}
	if errors.Is(err, identity.ErrBadIdentity) {
		// The message says it once, in gRPC's terms: metadata, lower case.
		msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), identity.ErrBadIdentity.Error()+": "), "identity: ")
		msg = strings.Replace(msg, "header given more than once", "metadata given more than once", 1)
		return status.Error(codes.InvalidArgument, "bad caller identity: "+grpcKeyNames(msg))
	}
	var pe *panicError
	if errors.As(err, &pe) {
		l.log.Error("grpclimit: "+panicked+"; call refused", append(attrs, "panic", pe.value)...)
	} else {
		l.log.Error("grpclimit: "+failed, append(attrs, "err", err)...)
	}
	return status.Error(codes.Internal, "rate limiter cannot identify the caller")
}

// isStoreError reports an engine error that the store-error policy
// applies to.
func isStoreError(err error) bool {
	return errors.Is(err, engine.ErrStore) || errors.Is(err, engine.ErrClosed)
}

// storeError counts and logs a store error under rule: under the policy in
// force, but for a shadow rule, which never refuses a call, under FailOpen
// unless the policy is FailLocal.
func (l *Limiter) storeError(rule *sluice.CompiledRule, err error, shadow bool) {
	policy := l.policy
	if shadow && policy == sluice.FailClosed {
		policy = sluice.FailOpen
	}
	if l.metrics != nil {
		l.metrics.ObserveStoreError(rule.Name(), policy)
	}
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < storeLogInterval || !l.lastLog.CompareAndSwap(last, now) {
		l.unlogged.Add(1)
		return
	}
	l.log.Warn("grpclimit: rate limit store error",
		"rule", rule.Name(), "policy", string(policy), "err", err, "suppressed", l.unlogged.Swap(0))
}
