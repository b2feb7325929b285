package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/clip"
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
	// (package metrics' *Metrics counts them for Prometheus, package
	// sluiceotel's *Observer through OpenTelemetry, with an event on the
	// request's span).
	Metrics sluice.Observer
	// OnStoreError is what happens to a call when the store fails:
	// sluice.FailOpen (the default when empty) lets it through,
	// sluice.FailClosed ends it with codes.Unavailable, sluice.FailLocal
	// decides it with Local instead.
	OnStoreError sluice.StoreErrorPolicy
	// Local decides the calls the store could not, under sluice.FailLocal:
	// on its in-process engine, under each rule's share of the fleet
	// (sluice.LocalFallback). Required with FailLocal, ignored otherwise.
	Local *sluice.LocalFallback
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
	// DecisionInContext, when true, puts each admitted call's decision in
	// the context its handler sees (a stream's Context too), for
	// DecisionFrom. It costs a context (and, for a stream, a wrapper) per
	// call, so it is off by default: the decision is in the response
	// metadata either way.
	DecisionInContext bool
	// Logger receives store errors (at most one line a second), contained
	// panics of the IdentityFunc and Cost, and other internal errors; nil
	// means slog.Default().
	Logger *slog.Logger
	// Watch, when not nil, is told of each rule's decision that denied a
	// caller or left it near its limit (sluice.Watcher): package
	// throttled's Tracker keeps a bounded live list of them.
	Watch sluice.Watcher

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
	deniedMessage = "rate limit exceeded for rule "
	unavailable   = "rate limiter unavailable"
)

// Limiter rate-limits the calls of a gRPC server: UnaryServerInterceptor
// and StreamServerInterceptor return its interceptors, and Limit is the
// one method of go-grpc-middleware v2's ratelimit.Limiter, for programs
// that chain that package's interceptors. Make one with New. A Limiter is
// safe for concurrent use, and keeps no state of its own between calls
// but its store-error log's pace: the rules are the Registry's, the
// budgets the Engine's.
type Limiter struct {
	door     *sluice.Door[call]
	reg      *sluice.Registry
	id       *identity.Identifier
	identify IdentityFunc
	cost     func(context.Context, string, *sluice.CompiledRule) int64
	shadowMD bool // ShadowMetadata
	denialMD bool // DenialMetadataOnly
	inCtx    bool // DecisionInContext
	log      *slog.Logger
	wait     func(context.Context, time.Duration) bool
	infos    infoCache // what each rule's decisions send, worked out once
}

// call is a call as the Limiter's Door reads it: the server call's context
// and its full method name.
type call struct {
	ctx    context.Context
	method string
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
// both doors. The name is matched as the Ruleset matches a path, in
// canonical form (sluice.CanonicalPath), which leaves every name grpc-go
// dispatches as it is: grpc-go routes on the exact name, so a name spelt
// otherwise reaches no handler and no interceptor (it is answered
// Unimplemented), unless the server has an UnknownServiceHandler, whose
// calls are matched on their name's canonical form. The match mode and the default are the Ruleset's: one rule
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
// ones (sluice.Ruleset.AppendMatchShadow), so they never change what those
// decide, and they are decided only for a call the enforced rules let
// through (a refused call spends nothing, under any rule). Several shadow
// rules of one call (all mode) are decided together, as enforced ones are.
// A store error under a shadow rule never refuses the call: it is counted
// under FailOpen, or under FailLocal the rule is decided locally. A shadow
// decision sends no metadata unless Config.ShadowMetadata is set.
func New(cfg Config) (*Limiter, error) {
	l := &Limiter{
		reg:      cfg.Registry,
		id:       cfg.Identifier,
		identify: cfg.Identity,
		cost:     cfg.Cost,
		shadowMD: cfg.ShadowMetadata,
		denialMD: cfg.DenialMetadataOnly,
		inCtx:    cfg.DecisionInContext,
		log:      cfg.Logger,
		wait:     cfg.wait,
	}
	var err error
	l.door, err = sluice.NewDoor(sluice.DoorConfig[call]{
		Name:         "sluice/grpclimit",
		Engine:       cfg.Engine,
		Key:          l.key,  // identity.go
		Plan:         l.plan, // plan.go
		Host:         authority,
		Metrics:      cfg.Metrics,
		OnStoreError: cfg.OnStoreError,
		Local:        cfg.Local,
		Logger:       cfg.Logger,
		Watch:        cfg.Watch,
	})
	if err != nil {
		return nil, err
	}
	if l.reg == nil {
		return nil, errors.New("sluice/grpclimit: Config.Registry is required")
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

// UnaryServerInterceptor returns the interceptor that limits unary calls,
// for grpc.UnaryInterceptor or grpc.ChainUnaryInterceptor.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, delay, res, err := l.decide(ctx, info.FullMethod)
		if md != nil {
			grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		if res != nil && res.Held != nil {
			defer l.door.Release(ctx, res.Held) // the call's slots, when its handler returns
		}
		if delay > 0 && !l.wait(ctx, delay) {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if l.inCtx && res != nil && res.Verdict == sluice.Allowed {
			ctx = withDecision(ctx, res.Rule, res.Decision) // decision.go: DecisionFrom
		}
		if res == nil || res.Reserved == nil {
			return handler(ctx, req)
		}
		ts := &trailerStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)} // settle.go
		resp, err := handler(grpc.NewContextWithServerTransportStream(ctx, ts), req)
		l.settle(ctx, res, ts.trailer(), err)
		return resp, err
	}
}

// StreamServerInterceptor returns the interceptor that limits streams, for
// grpc.StreamInterceptor or grpc.ChainStreamInterceptor: each stream is
// decided once, as one call, when it opens.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		md, delay, res, err := l.decide(ctx, info.FullMethod)
		if md != nil {
			ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		if res != nil && res.Held != nil {
			defer l.door.Release(ctx, res.Held) // the stream's slots, held while it is open
		}
		if delay > 0 && !l.wait(ctx, delay) {
			return status.FromContextError(ctx.Err()).Err()
		}
		if l.inCtx && res != nil && res.Verdict == sluice.Allowed {
			ss = &decisionStream{ServerStream: ss, ctx: withDecision(ctx, res.Rule, res.Decision)} // decision.go
		}
		if res == nil || res.Reserved == nil {
			return handler(srv, ss)
		}
		ts := &trailerServerStream{ServerStream: ss} // settle.go
		err = handler(srv, ts)
		l.settle(ctx, res, ts.trailer(), err)
		return err
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
// the status as this package documents it. Limit does not see the call
// end, so it settles nothing (the estimate stands) and holds no slot: a
// concurrency rule's slot is given back at once, and such a rule refuses
// a call only when the Limiter's own interceptors, or other processes,
// hold every slot.
func (l *Limiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	md, delay, res, err := l.decide(ctx, method) // no settle: the call's end is not seen here
	if res != nil {
		l.door.Release(ctx, res.Held)
	}
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

// decide decides a call of the given method. It returns the response
// metadata to set (nil for none), the delay to wait before the handler,
// the outcome to settle, and whose slots to give back, once the call has
// ended, or whose decision goes in the handler's context (nil for none: no
// rule with Settle, no concurrency rule, and no decision for the context),
// and the status error to end the call with (nil to let it
// through).
func (l *Limiter) decide(ctx context.Context, method string) (metadata.MD, time.Duration, *sluice.Outcome, error) {
	md, delay, out, err := l.decideOutcome(ctx, method)
	if err != nil || (out.Reserved == nil && out.Held == nil && !(l.inCtx && out.Verdict == sluice.Allowed)) {
		return md, delay, nil, err
	}
	return md, delay, &out, nil
}

// decideOutcome is decide, returning the Door's Outcome.
func (l *Limiter) decideOutcome(ctx context.Context, method string) (metadata.MD, time.Duration, sluice.Outcome, error) {
	rs := l.reg.Ruleset()
	// gRPC calls have no HTTP method: "" matches the rules of AnyMethod
	// only. The path is the full method name.
	out := l.door.Decide(ctx, rs, "", method, call{ctx, method})
	if out.ShadowErr != nil && !errors.Is(out.ShadowErr, identity.ErrBadIdentity) {
		// A shadow rule that cannot key the call is no reason to refuse
		// it: the call goes on (what is not the client's fault is logged).
		l.callerError(out.ShadowErr, method)
	}
	switch out.Verdict {
	case sluice.Unlimited:
		if out.Shadow != nil && l.shadowMD && !l.denialMD {
			return decisionMD(l.infos.get(rs, out.Shadow), out.Shadow, out.ShadowDecision), 0, out, nil
		}
		return nil, 0, out, nil
	case sluice.Passed:
		return nil, 0, out, nil
	case sluice.Allowed:
		if l.denialMD {
			return nil, out.Delay, out, nil
		}
		return decisionMD(l.infos.get(rs, out.Rule), out.Rule, out.Decision), out.Delay, out, nil
	case sluice.Denied:
		ri := l.infos.get(rs, out.Rule)
		return decisionMD(ri, out.Rule, out.Decision), 0, out, denial(ri, out.Decision)
	case sluice.Unidentified:
		return nil, 0, out, l.callerError(out.Err, method)
	case sluice.Unavailable:
		if ctx.Err() != nil && errors.Is(out.Err, ctx.Err()) {
			// The call ended before it was decided: its own status.
			return nil, 0, out, status.FromContextError(ctx.Err()).Err()
		}
		return nil, 0, out, status.Error(codes.Unavailable, unavailable)
	}
	return nil, 0, out, status.Error(codes.Internal, "rate limiter error") // sluice.Failed, logged by the Door
}

// grpcKeyNames lower-cases the header names in msg that follow "once: ",
// as gRPC metadata keys are.
func grpcKeyNames(msg string) string {
	if before, name, ok := strings.Cut(msg, "once: "); ok {
		return before + "once: " + strings.ToLower(name)
	}
	return msg
}

// maxLoggedError bounds the bytes of an error (or a panic's value) a log
// line quotes; the method is quoted up to clip.Max bytes.
const maxLoggedError = 512

// callerError returns the status of a call refused because its caller
// (its key, its plan) or cost could not be had, err being the Door's
// *sluice.KeyError: the status an IdentityFunc returned, InvalidArgument
// for a malformed identity, and otherwise Internal, logged as failed (or
// as panicked, for a panic the Door contained).
func (l *Limiter) callerError(err error, method string) error {
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
	method = clip.String(method, clip.Max) // a client names the method an unknown-service handler serves
	attrs := []any{"method", method}
	failed, panicked := "cannot find the caller's plan", "identity function panicked"
	if ke := (*sluice.KeyError)(nil); errors.As(err, &ke) && ke.Rule != nil {
		attrs = []any{"rule", ke.Rule.Name(), "method", method}
		failed, panicked = "cannot identify the caller", "identity or cost function panicked"
	}
	// An IdentityFunc's error may quote the call's metadata: a log line
	// quotes at most maxLoggedError bytes of it.
	if pe := (*sluice.PanicError)(nil); errors.As(err, &pe) {
		l.log.Error("sluice/grpclimit: "+panicked+"; call refused", append(attrs, "panic", clip.String(fmt.Sprint(pe.Value), maxLoggedError))...)
	} else {
		l.log.Error("sluice/grpclimit: "+failed, append(attrs, "err", clip.String(err.Error(), maxLoggedError))...)
	}
	return status.Error(codes.Internal, "rate limiter cannot identify the caller")
}
