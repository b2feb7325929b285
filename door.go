package sluice

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// StoreErrorPolicy says what a door (package httplimit's middleware,
// package grpclimit's interceptors) does with a request when the store
// fails and no decision can be made. A shadow rule (Rule.Shadow) never
// refuses a request, whatever the policy.
type StoreErrorPolicy string

// The store error policies.
const (
	// FailOpen, the default, lets the request pass (the error is logged
	// and counted).
	FailOpen StoreErrorPolicy = "open"
	// FailClosed refuses the request (503 Service Unavailable over HTTP,
	// codes.Unavailable over gRPC).
	FailClosed StoreErrorPolicy = "closed"
	// FailLocal decides the request in-process instead, with a LocalFallback:
	// on an in-process engine, under the rule divided by the fleet's size, so
	// that a fleet of gateways sharing a store (Redis) keeps limiting,
	// approximately, while the store is down. The next request tries the store
	// again; the store's circuit breaker makes that attempt fail at once while
	// it stays down. The error is logged and counted, and so is each decision
	// made locally (LocalObserver).
	FailLocal StoreErrorPolicy = "local"
)

// StoreErrorPolicies lists every valid StoreErrorPolicy, in a stable order.
var StoreErrorPolicies = []StoreErrorPolicy{FailOpen, FailClosed, FailLocal}

// Observer is told what a door decides: each decision under a rule and
// each store error met. Package metrics' *Metrics is one, exporting them to
// Prometheus; the interface keeps the doors free of any metrics library.
//
// A door calls it on the request path after the engine has returned, never
// under an engine stripe lock, so an Observer must be fast, must not block
// and must be safe for concurrent use.
type Observer interface {
	// ObserveDecisionCost records one decision under the named rule:
	// allowed or denied, the cost an allowed one spent, and d, the time
	// the engine took to decide.
	ObserveDecisionCost(rule string, allowed bool, cost int64, d time.Duration)
	// ObserveStoreError records a store error met under the named rule and
	// the policy that then applied.
	ObserveStoreError(rule string, policy StoreErrorPolicy)
}

// LocalObserver is an Observer that is also told which decisions were made
// in-process under the FailLocal policy. A door tells ObserveDecisionCost
// of every decision, local ones included, and ObserveLocalDecision of a
// local one besides; an Observer that is not a LocalObserver still sees
// every decision.
type LocalObserver interface {
	Observer
	// ObserveLocalDecision records that a decision under the named rule,
	// allowed or denied, was made in-process because the store failed.
	ObserveLocalDecision(rule string, allowed bool)
}

// ShadowObserver is an Observer that is also told what shadow rules
// (Rule.Shadow) would have denied. A door tells ObserveDecisionCost of a
// shadow rule's allowed decisions, as of any rule's, and
// ObserveShadowDenial, not ObserveDecisionCost, of its would-be denials:
// those requests passed, so a count of denials stays a count of requests
// refused. An Observer that is not a ShadowObserver is not told of
// would-be denials at all.
type ShadowObserver interface {
	Observer
	// ObserveShadowDenial records that the named shadow rule would have
	// denied a request of the given cost, which passed and spent nothing
	// under the rule; d is the time the engine took to decide.
	ObserveShadowDenial(rule string, cost int64, d time.Duration)
}

// ContextObserver is an Observer that is also told, once per request, the
// Outcome a door decided, with the request's context: where a tracer finds
// the request's span (package sluiceotel adds an event to it). The context
// is the one the door passed to Door.Decide: package httplimit's is the
// request's (http.Request.Context), package grpclimit's the call's.
//
// A door calls ObserveOutcome after every step of Door, before it answers,
// under the same rules as the other Observer methods: it must be fast, must
// not block and must be safe for concurrent use. An Observer that is not a
// ContextObserver costs a door nothing of this.
type ContextObserver interface {
	Observer
	// ObserveOutcome records what became of one request: out is the
	// Outcome Decide returns, and ctx the request's context.
	ObserveOutcome(ctx context.Context, out Outcome)
}

// Door is the decision every door makes, written once: package httplimit's
// middleware, package grpclimit's interceptors and package replay's
// replayer each wrap one, and differ only in what they read of a request
// and how they answer. For a request, Decide
//
//  1. matches the rules in force to its RequestShape (Ruleset.AppendMatch): its
//     method and path, its host (DoorConfig.Host) when a rule names one,
//     its caller's plan (DoorConfig.Plan) when a rule names one;
//  2. asks the door for the caller's key and the request's cost under
//     each matching rule (DoorConfig.Key), leaves out the rules under
//     which the caller is exempt (DoorConfig.Exempt), and replaces each
//     rule by the caller's override (Ruleset.Override);
//  3. decides on the engine: engine.Engine.Apply for one rule, ApplyAll
//     for several (nothing is spent unless every one allows), with the
//     request's context; a concurrency rule's slot is taken first
//     (engine.Engine.AcquireInto), and given back at once when another
//     rule refuses the request (slots.go);
//  4. on a store error, follows the policy: FailOpen lets the request pass
//     undecided, FailClosed refuses it, FailLocal decides it again on the
//     Local, under each rule's share;
//  5. tells the observers (DoorConfig.Metrics, DoorConfig.Tally) of each
//     rule's decision;
//  6. picks the decision the answer reports: the denying rule with the
//     longest RetryAfter when some deny, else the rule with the least
//     Remaining;
//  7. for a request that passes (no enforced rule covers it, they allow
//     it, or the store failed under FailOpen), decides it the same way
//     under the shadow rules that cover it (Ruleset.AppendMatchShadow),
//     which never refuse it: their would-be denials are counted
//     (ShadowObserver), and a store error under them is FailOpen's unless
//     the policy is FailLocal;
//  8. tells a ContextObserver of the Outcome, with the request's context.
//
// It returns an Outcome, which the door turns into its answer; the slots
// of an Allowed Outcome's Held are the door's to give back (Door.Release)
// once the response has ended.
//
// A Door is safe for concurrent use when its DoorConfig's functions are.
// It keeps no state between requests but its store-error log's pace.
type Door[R any] struct {
	core   *Decider
	key    func(R, *CompiledRule) (string, int64, error)
	host   func(R) string
	plan   func(R) (string, error)
	exempt func(string) bool
	ctxObs ContextObserver // DoorConfig.Metrics, when it is one
}

// DoorConfig configures the Door NewDoor returns: what a door reads of its
// requests, of type R, and what it does when the store fails.
type DoorConfig[R any] struct {
	// Name is the door's name, such as "httplimit": the start of its log
	// lines and of the errors NewDoor returns, which name the fields of
	// the door's own Config (Config.OnStoreError, Config.Local). Empty
	// means "sluice".
	Name string
	// Engine decides and records requests. Required.
	Engine *engine.Engine
	// Key returns the key the caller of req is counted under by rule
	// (package identity makes it, for the rule's Scope) and what req spends
	// under rule: zero or less means the rule's own Cost. It is called for
	// each rule covering req, most specific first, with the rule as
	// configured (before the caller's override, which needs the key). An
	// error refuses the request (Unidentified) when rule is enforced; when
	// it is a shadow rule, the shadow rules do not decide the request
	// (Outcome.ShadowErr), which goes on. A panic in Key is recovered and
	// returned as a *PanicError. Under a rule scoped param:NAME the Door
	// makes the key itself, "param:" and the value of the parameter in the
	// path it matched, and takes only the cost of Key's answer (package
	// identity's Key answers "" for such a scope). In a group of rules
	// whose levels count within a tenant (group.go), Key may also be asked
	// the caller's key under the group's tenant level when that rule does
	// not cover req; its cost is then not used. A key beginning with a
	// NUL byte, the form of a level's key within its tenant (NestedKey),
	// is refused as an error is. Required.
	Key func(req R, rule *CompiledRule) (key string, cost int64, err error)
	// Host returns req's host as the door received it (the Host header,
	// the :authority); the door matches its name, without the port and in
	// lower case, as RequestShape.Host. It is called only when a rule of the
	// ruleset names a host (Rule.Host). Nil means the door knows no host: only rules
	// naming none cover its requests.
	Host func(req R) string
	// Plan returns the plan of req's caller, "" for none. It is called
	// only when a rule of the ruleset names a plan (Rule.Plan),
	// before matching. An error refuses the request (Unidentified, with no
	// rule); a panic is recovered as Key's is. Nil means every caller is
	// on no plan.
	Plan func(req R) (string, error)
	// Exempt, when set, reports the caller keys no rule limits: a request
	// whose caller's key under an enforced rule is exempt is not decided by
	// that rule, and one exempt under every enforced rule covering it
	// passes undecided (Passed), by the shadow rules too.
	Exempt func(key string) bool
	// Metrics, when not nil, is told every decision and store error; a
	// LocalObserver is told which decisions were local, a ShadowObserver
	// the shadow rules' would-be denials, a ContextObserver each request's
	// Outcome with its context.
	Metrics Observer
	// OnStoreError is what becomes of a request when the store fails:
	// FailOpen (the default when empty) lets it pass, FailClosed refuses
	// it (Unavailable), FailLocal decides it on Local instead.
	OnStoreError StoreErrorPolicy
	// Local decides the requests the store could not, under FailLocal: on
	// its in-process engine, under each rule's share of the fleet.
	// Required with FailLocal, ignored otherwise.
	Local *LocalFallback
	// Logger receives store errors (at most one line a second) and the
	// engine errors no decision came of; nil means slog.Default().
	Logger *slog.Logger
	// Tally, when set, is told each rule's part in every decision, enforced
	// or shadow: the rule as configured (not the caller's override or a
	// local share), the caller's key and the cost under it, and whether
	// the rule admitted the request. In all mode a rule may admit a
	// request that another denies, and then nothing was spent. It is for a
	// program that keeps its own account per rule and caller (package
	// replay's report); Metrics counts for an operator.
	Tally func(rule *CompiledRule, key string, cost int64, allowed bool)
	// Watch, when not nil, is told each rule's decision, enforced or
	// shadow, that denied or left the caller near its limit (Watcher):
	// for a live list of who is being throttled.
	Watch Watcher
}

// NewDoor returns a Door. It fails when Engine or Key is missing,
// OnStoreError is not a known policy, or it is FailLocal without Local.
func NewDoor[R any](cfg DoorConfig[R]) (*Door[R], error) {
	name := cfg.Name
	if name == "" {
		name = "sluice"
	}
	switch {
	case cfg.Engine == nil:
		return nil, fmt.Errorf("%s: Config.Engine is required", name)
	case cfg.Key == nil:
		return nil, fmt.Errorf("%s: DoorConfig.Key is required", name)
	}
	core, err := NewDecider(DeciderConfig{Name: name, Engine: cfg.Engine, Metrics: cfg.Metrics,
		OnStoreError: cfg.OnStoreError, Local: cfg.Local, Logger: cfg.Logger, Tally: cfg.Tally, Watch: cfg.Watch})
	if err != nil {
		return nil, err
	}
	d := &Door[R]{core: core, key: cfg.Key, host: cfg.Host, plan: cfg.Plan, exempt: cfg.Exempt}
	d.ctxObs, _ = cfg.Metrics.(ContextObserver)
	return d, nil
}

// Verdict says what became of a request a Door decided, and so what the
// door answers.
type Verdict uint8

// The verdicts of an Outcome.
const (
	// Unlimited: no enforced rule (and no enforced default) covers the
	// request. It passes, without fields; the shadow rules have decided
	// it.
	Unlimited Verdict = iota
	// Passed: enforced rules cover the request, but none decided it: the
	// caller is exempt under each (DoorConfig.Exempt; then no shadow rule
	// decided it either), or the store failed under FailOpen (the shadow
	// rules have decided it). It passes, without fields.
	Passed
	// Allowed: the enforced rules admit the request. It passes, after
	// Outcome.Delay, with Outcome.Rule's fields.
	Allowed
	// Denied: an enforced rule denies the request (Outcome.Rule); nothing
	// was spent.
	Denied
	// Unidentified: the door could not say who the caller is, or what the
	// request costs: Outcome.Err is a *KeyError. The request is refused
	// (400 for a bad identity, else 500, over HTTP); nothing was spent.
	Unidentified
	// Unavailable: the store failed and the request is refused: under
	// FailClosed, or under FailLocal when the local engine failed too (it
	// is closed). Outcome.Err is the engine's error, already logged and
	// counted (503 over HTTP, codes.Unavailable over gRPC). It is also the
	// verdict, under any policy, of a request whose context ended before
	// the engine decided it: Outcome.Err then wraps the context's error,
	// nothing was spent, and nothing is logged or counted (the client has
	// gone, or its deadline passed).
	Unavailable
	// Failed: the engine could not decide the request for another reason:
	// a cost above the rule's capacity, a configuration error. Outcome.Err
	// is the engine's error, already logged (500, codes.Internal).
	Failed
)

var verdictNames = [...]string{"unlimited", "passed", "allowed", "denied", "unidentified", "unavailable", "failed"}

// String returns the verdict's name.
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Outcome is what a Door decided of one request.
type Outcome struct {
	// Verdict says what became of the request.
	Verdict Verdict
	// Rule is the enforced rule the answer reports when Allowed or Denied,
	// as it decided: with the caller's override, or as its local share
	// (its Name and Limit namespace are the configured rule's). When
	// Unavailable or Failed it is the rule the error concerns; otherwise
	// nil.
	Rule *CompiledRule
	// Key is the caller's key under Rule, "" when Rule is nil.
	Key string
	// Decision is Rule's decision when Allowed or Denied: in all mode the
	// most restrictive of the rules' (step 6 of Door).
	Decision algo.Decision
	// Delay is how long an Allowed request waits before it goes on: the
	// longest Delay of its rules' decisions (a leaky bucket's).
	Delay time.Duration
	// Err is why the request was refused when Unidentified, Unavailable
	// or Failed; nil otherwise.
	Err error

	// Shadow is the shadow rule whose decision a door reports when it
	// sends a shadow rule's fields (the one with the least Remaining), as
	// it decided; nil when no shadow rule decided the request.
	Shadow *CompiledRule
	// ShadowDecision is Shadow's decision, made to allow (no RetryAfter,
	// no Delay): the request passes whatever it says.
	ShadowDecision algo.Decision
	// ShadowDenied reports that a shadow rule would have denied the
	// request.
	ShadowDenied bool
	// Reserved, for an Allowed request decided under a rule with Settle,
	// holds the batch's reservations: the door settles them once the
	// response has ended (Door.Settle), or leaves their estimates
	// standing. Nil otherwise.
	Reserved *Reserved
	// Held, for an Allowed request decided under concurrency rules,
	// holds the slots it took: the door gives them back once the response
	// has ended or the client has gone (Door.Release); left alone, they
	// come back at their rules' MaxHold. Nil otherwise.
	Held *Held

	// ShadowErr is the door's Key error that kept the shadow rules from
	// deciding the request; it went on all the same. A door logs what is
	// not the client's fault.
	ShadowErr *KeyError
}

// KeyError is an error of a door's Key or Plan function: the caller's key
// or the request's cost under Rule could not be had, or (Rule nil) the
// caller's plan.
type KeyError struct {
	// Rule is the rule the key was asked for, as configured; nil for the
	// plan.
	Rule *CompiledRule
	// Err is the function's error, or a *PanicError.
	Err error
}

// Error returns Err's text.
func (e *KeyError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *KeyError) Unwrap() error { return e.Err }

// PanicError is a panic a Door recovered from a door's function (Key,
// Plan): that request is refused, the program goes on.
type PanicError struct {
	// Value is what the function panicked with.
	Value any
}

// Error returns "sluice: panic: " and the value.
func (e *PanicError) Error() string { return fmt.Sprintf("sluice: panic: %v", e.Value) }

// WaitDelay waits d, or until ctx ends, and reports whether it waited all
// of d: how a door holds an Allowed request for its Outcome.Delay.
func WaitDelay(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
