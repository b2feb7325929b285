package sluice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/internal/logpace"
)

// Decider is the decision core every door calls, written once. A door is
// an adapter around it: it turns its protocol's request into a Batch (for
// each limit covering the request, the engine's request: limit, key and
// cost), and the Decider's answer into its protocol's. For a batch,
// Decide
//
//  1. spends on the engine: engine.Engine.Apply for one request, ApplyAll
//     for several (nothing is spent unless every one allows); in a
//     Partial batch a denial under a soft request leaves the others to be
//     decided again without it; in a batch with Leases, the concurrency
//     requests take their slots first, and give them back at once when
//     the batch is refused (slots.go);
//  2. on a store error, follows the policy: FailOpen and FailClosed return
//     the error (ErrVerdict says what becomes of the request), FailLocal
//     decides the batch again on the Local, under each rule's share;
//  3. counts and logs a store error (at most one line a second) and logs
//     any other;
//  4. tells the observers (DeciderConfig.Metrics, DeciderConfig.Tally) of
//     each request's decision.
//
// Pick then chooses the decision the answer reports. Package sluice's Door
// (under httplimit's middleware, grpclimit's interceptors and replay) and
// package envoyrls' Server each decide through one.
//
// A Decider is safe for concurrent use. It keeps no state between
// requests but its store-error log's pace.
type Decider struct {
	name      string
	eng       *engine.Engine
	metrics   Observer       // nil: nothing observes
	localObs  LocalObserver  // metrics, when it is one
	shadowObs ShadowObserver // metrics, when it is one
	settleObs SettleObserver // metrics, when it is one
	slotObs   SlotObserver   // metrics, when it is one
	// releaseCtx is how a slot's release gets its context, by the
	// engine's store (slots.go); a LocalFallback's memory store takes
	// any.
	releaseCtx int
	policy     StoreErrorPolicy
	local      *LocalFallback // with policy FailLocal
	log        *slog.Logger
	tally      func(*CompiledRule, string, int64, bool)
	watch      Watcher // nil: no one watches

	storeLog logpace.Pace // paces the store errors' log lines
	failLog  logpace.Pace // paces the lines of requests that could not be decided
}

// DeciderConfig configures the Decider NewDecider returns. DoorConfig's
// fields of the same names are these.
type DeciderConfig struct {
	// Name is the door's name, such as "httplimit": the start of its log
	// lines and of the errors NewDecider returns. Empty means "sluice".
	Name string
	// Engine decides and records requests. Required.
	Engine *engine.Engine
	// Metrics, when not nil, is told every decision and store error; a
	// LocalObserver is told which decisions were local, a ShadowObserver
	// the would-be denials of soft requests.
	Metrics Observer
	// OnStoreError is what becomes of a request when the store fails:
	// FailOpen (the default when empty), FailClosed, or FailLocal, which
	// decides it on Local instead.
	OnStoreError StoreErrorPolicy
	// Local decides the requests the store could not, under FailLocal.
	// Required with FailLocal, ignored otherwise.
	Local *LocalFallback
	// Logger receives store errors (at most one line a second) and the
	// engine errors no decision came of; nil means slog.Default().
	Logger *slog.Logger
	// Tally, when set, is told each rule's part in every decision of a
	// batch of rules (Batch.Rules): see DoorConfig.Tally.
	Tally func(rule *CompiledRule, key string, cost int64, allowed bool)
	// Watch, when not nil, is told each rule's decision in a batch of
	// rules that denied or left the caller near its limit (Watcher).
	Watch Watcher
}

// NewDecider returns a Decider. It fails when Engine is missing,
// OnStoreError is not a known policy, or it is FailLocal without Local.
func NewDecider(cfg DeciderConfig) (*Decider, error) {
	name := cfg.Name
	if name == "" {
		name = "sluice"
	}
	if cfg.Engine == nil {
		return nil, fmt.Errorf("%s: Config.Engine is required", name)
	}
	c := &Decider{name: name, eng: cfg.Engine, metrics: cfg.Metrics, policy: cfg.OnStoreError, log: cfg.Logger, tally: cfg.Tally, watch: cfg.Watch}
	c.localObs, _ = cfg.Metrics.(LocalObserver)
	c.shadowObs, _ = cfg.Metrics.(ShadowObserver)
	c.settleObs, _ = cfg.Metrics.(SettleObserver)
	c.slotObs, _ = cfg.Metrics.(SlotObserver)
	c.releaseCtx = releaseCtxOf(cfg.Engine.Backend())
	switch c.policy {
	case "":
		c.policy = FailOpen
	case FailOpen, FailClosed:
	case FailLocal:
		if cfg.Local == nil {
			return nil, fmt.Errorf("%s: Config.Local is required with OnStoreError %q", name, FailLocal)
		}
		c.local = cfg.Local
	default:
		return nil, fmt.Errorf("%s: Config.OnStoreError must be %q, %q or %q, got %q", name, FailOpen, FailClosed, FailLocal, string(c.policy))
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// Engine returns the engine the Decider spends on.
func (c *Decider) Engine() *engine.Engine { return c.eng }

// Batch says what a request's engine requests, one per limit covering
// it, are made under, as a door gives them to a Decider. Its slices may be
// the caller's stack arrays: Decide never writes to them. It is passed by
// value, and apart from the requests (which the engine keeps hold of), so
// that the arrays stay on the caller's stack.
type Batch struct {
	// Rules, for a door of rules, are the rules the requests are made
	// under, one per request: the observers know a request by its rule's
	// name, Tally by the rule as configured, and under FailLocal the Local
	// decides each under its rule's share. Nil for a door whose limits are
	// not rules (envoyrls), whose requests cannot be decided locally.
	Rules []*CompiledRule
	// Names name the requests, one each, when Rules is nil: in log lines
	// and to the observers.
	Names []string
	// Soft, when not nil, says of each request whether a denial under it
	// leaves the request to pass (Envoy's shadow_mode and quota_mode). In
	// a Shadow batch every request is soft.
	Soft []bool
	// Partial makes a soft request's denial leave the others to be decided
	// again without it, so that the request spends where it is allowed
	// (Envoy's quota_mode); otherwise a batch spends on all its requests
	// or none.
	Partial bool
	// Shadow marks a batch of shadow rules: never refusing the request,
	// their denials told as would-be denials (ShadowObserver), a store
	// error under them FailOpen's unless the policy is FailLocal.
	Shadow bool
	// Reserve, when not nil, decides the batch on estimates (the
	// requests' costs): engine.Engine.ReserveAll, all or nothing as any
	// batch that is not Partial, filling Reserve (one per request) with
	// the reservations that Decider.Settle settles once the actual cost
	// is known. Under FailLocal they are the Local's. Neither a Partial
	// nor a Shadow batch reserves.
	Reserve []engine.Reservation
	// Leases, when not nil, says that the batch's first len(Leases)
	// requests are of concurrency limits (algo.ConcurrencyName): each
	// takes a slot into its Lease first, and the other requests are
	// decided after, as a batch of their own; when any is refused, the
	// slots taken are given back at once (see slots.go). An allowed
	// batch's slots are the caller's to give back (Decider.Release).
	// Neither a Partial nor a Shadow batch takes slots.
	Leases []engine.Lease
}

// soft reports whether a denial under request i of b leaves the request to
// pass.
func (b Batch) soft(i int) bool { return b.Shadow || (b.Soft != nil && b.Soft[i]) }

// name returns the name request i of b is known by.
func (b Batch) name(i int) string {
	if b.Rules != nil {
		return b.Rules[i].Name()
	}
	return b.Names[i]
}

// Decided is what a Decider decided of a Batch.
type Decided struct {
	// Batch and Requests are the batch and the engine's requests as
	// decided: the ones given, or after a fallback on the Local the rules'
	// shares and their requests, in new slices.
	Batch
	Requests []engine.Request
	// Decisions are the requests' decisions, one each, in the Batch's
	// order.
	Decisions []algo.Decision
	// All reports that every request allowed. In a batch that is not
	// Partial, the requests spent then, and only then.
	All bool
	// Over reports that a request not soft denied: the request is refused
	// and nothing was spent. In a Partial batch that is not Over, each
	// request that allowed spent.
	Over bool
	// Local reports that the Local decided the batch, the store having
	// failed (FailLocal).
	Local bool

	tried int // with Leases, a slot refused: the requests from it on were not decided; 0: all were
}

// Tried reports whether request i was decided: every request is, but in a
// batch with Leases where a slot was refused, those after it are not (and
// their decisions are zero).
func (d *Decided) Tried(i int) bool { return d.tried == 0 || i < d.tried }

// Spent reports whether request i spent.
func (d *Decided) Spent(i int) bool {
	if d.Partial {
		return !d.Over && d.Decisions[i].Allowed
	}
	return d.All
}

// Decide decides reqs, a request's engine requests made under b, in its
// steps (see Decider), in scratch, which the caller holds: the decision of a
// single request is stored there, and a Partial batch's requests decided
// again. An error is
// one no decision came of (ErrVerdict says what becomes of the request),
// and at is the index of the request it concerns: the Redis Cluster
// slot's call of an engine.RequestError, else the first. The error has
// been counted and logged (at most a line a second, with the count of
// those held back).
func (c *Decider) Decide(ctx context.Context, b Batch, reqs []engine.Request, scratch *Scratch) (out Decided, at int, err error) {
	policy := c.policy
	if b.Shadow && policy != FailLocal {
		policy = FailOpen // a shadow rule never refuses a request
	}
	var start time.Time
	if c.metrics != nil { // time the decision only for someone to see it
		start = time.Now()
	}
	out, err = c.spend(ctx, c.eng, b, reqs, scratch)
	if err != nil {
		var re *engine.RequestError
		if errors.As(err, &re) && re.Request < len(reqs) {
			at = re.Request
		}
	}
	if err != nil && ended(ctx, err) {
		return Decided{Batch: b, Requests: reqs}, at, err // no one waits for the answer
	}
	if err != nil && engine.IsStoreError(err) {
		c.storeError(b.name(at), policy, err)
		if c.local == nil || policy != FailLocal || b.Rules == nil {
			return Decided{Batch: b, Requests: reqs}, at, err
		}
		b.Rules, reqs = c.local.requests(b.Rules, reqs)
		at = 0
		out, err = c.spend(ctx, c.local.eng, b, reqs, scratch)
		out.Local = true
	}
	out.Batch, out.Requests = b, reqs
	if err != nil {
		// Paced as the store's errors are: a cost out of range from a Cost
		// function that passes the client's number on fails every such
		// request, and a line for each would let a client fill the log.
		if ok, suppressed := c.failLog.Let(time.Now().UnixNano()); ok {
			c.log.Error(c.name+": cannot decide the request", "rule", b.name(at),
				"local", out.Local, "shadow", b.Shadow, "err", err, "suppressed", suppressed)
		}
		out.Decisions = nil
		return out, at, err
	}
	var elapsed time.Duration
	if c.metrics != nil {
		elapsed = time.Since(start)
	}
	for i, di := range out.Decisions {
		if !out.Tried(i) {
			break
		}
		if c.slotObs != nil && out.All && i < len(b.Leases) {
			c.slotObs.ObserveSlots(b.name(i), 1)
		}
		if c.metrics != nil {
			c.observe(b.name(i), out.Spent(i), di.Allowed, b.soft(i), reqs[i].Cost, elapsed, out.Local)
		}
		if c.tally != nil && b.Rules != nil {
			c.tally(b.Rules[i].configured(), reqs[i].Key, reqs[i].Cost, di.Allowed)
		}
		// Two hooks, not one: Tally hears every decision (replay's
		// account), Watch only the Near ones, so an allowed request far
		// from its limit costs serve's throttled list a comparison, no call.
		if c.watch != nil && b.Rules != nil && Near(di) {
			c.watch.Watch(b.Rules[i].configured(), reqs[i].Key, di)
		}
	}
	return out, 0, nil
}

// spend decides b's requests on e: Apply for one, its decision stored in
// scratch, ApplyAll for several; in a Partial batch, again without the soft
// requests denied, until every one left allows or one not soft denies.
func (c *Decider) spend(ctx context.Context, e *engine.Engine, b Batch, reqs []engine.Request, scratch *Scratch) (out Decided, err error) {
	if b.Leases != nil {
		return c.spendSlots(ctx, e, b, reqs, scratch) // slots.go
	}
	if b.Reserve != nil {
		if len(reqs) == 1 {
			err = e.ReserveInto(ctx, reqs[0].Limit, reqs[0].Key, reqs[0].Cost, &b.Reserve[0])
			out.All = err == nil && b.Reserve[0].Decision.Allowed
			out.Decisions = scratch.one[:]
		} else {
			// As for ApplyAll below: scratch's copy, so that reqs stays on
			// the caller's stack.
			scratch.again = append(scratch.again[:0], reqs...)
			out.All, err = e.ReserveAll(ctx, scratch.again, b.Reserve)
			out.Decisions = make([]algo.Decision, len(reqs))
		}
		for i := range reqs {
			out.Decisions[i] = b.Reserve[i].Decision
		}
		out.Over = !out.All
		return out, err
	}
	if len(reqs) == 1 {
		scratch.one[0], err = e.Apply(ctx, reqs[0].Limit, reqs[0].Key, reqs[0].Cost)
		out.Decisions, out.All = scratch.one[:], scratch.one[0].Allowed
		out.Over = !out.All && !b.soft(0)
		return out, err
	}
	// ApplyAll keeps hold of the slice it is given: it gets scratch's copy,
	// so that reqs, which may be the caller's stack array, stays there.
	scratch.again = append(scratch.again[:0], reqs...)
	ds, all, err := e.ApplyAll(ctx, scratch.again)
	out.Decisions, out.All = ds, all
	if err != nil || all {
		return out, err
	}
	for i, d := range ds {
		if !d.Allowed && !b.soft(i) {
			out.Over = true
		}
	}
	if out.Over || !b.Partial {
		return out, nil
	}
	return c.spendPartial(ctx, e, b, reqs, ds, scratch)
}

// Scratch is the working space of one Decide call, which the caller
// holds: the decision of a batch of one request, and the requests of a
// larger batch as the engine is given them. The zero value is ready;
// declare one in the calling frame (the doors of rules), or keep one across
// calls to reuse its capacity (envoyrls' pooled scratch). A Scratch serves
// one call at a time. (It was named Room before.)
type Scratch struct {
	one   [1]algo.Decision
	again []engine.Request // grown as needed, kept for the next call
}

// Clear forgets the keys and limits scratch holds, for a Scratch kept across
// calls: it keeps its capacity, not what the last call decided.
func (r *Scratch) Clear() { clear(r.again[:cap(r.again)]); r.again = r.again[:0] }

// spendPartial goes on with a Partial batch whose requests decided ds,
// some soft ones denied and none other: the requests that allowed are
// decided again, without the others, until every one left allows (they
// spend) or one not soft denies (nothing is spent). ds ends holding each
// request's last decision. It allocates only for a batch over
// maxStackRules.
func (c *Decider) spendPartial(ctx context.Context, e *engine.Engine, b Batch, all []engine.Request, ds []algo.Decision, scratch *Scratch) (out Decided, err error) {
	out.Decisions = ds
	var idxStack [maxStackRules]int
	rest := idxStack[:0]
	for i, d := range ds {
		if d.Allowed {
			rest = append(rest, i)
		}
	}
	for len(rest) > 0 {
		// Nothing is spent once the caller has gone: the engine is asked
		// only while the call's context lives.
		if err := ctx.Err(); err != nil {
			return out, err
		}
		reqs := scratch.again[:0]
		for _, i := range rest {
			reqs = append(reqs, all[i])
		}
		scratch.again = reqs
		again, allowed, err := e.ApplyAll(ctx, reqs)
		if err != nil {
			return out, err
		}
		for j, i := range rest {
			ds[i] = again[j]
		}
		if allowed {
			return out, nil
		}
		left := rest[:0]
		for j, i := range rest {
			switch {
			case again[j].Allowed:
				left = append(left, i)
			case !b.soft(i):
				out.Over = true
			}
		}
		if out.Over {
			return out, nil
		}
		rest = left
	}
	return out, nil
}

// ErrVerdict returns what becomes of a request whose batch Decide could not
// decide with err, under the policy that applied to it: a store error
// passes it undecided under FailOpen (Passed), else refuses it
// (Unavailable: FailClosed, or FailLocal when the Local failed too); ctx
// having ended, it is Unavailable, nothing spent, no one waiting for the
// answer; any other error refuses it as Failed.
func (c *Decider) ErrVerdict(ctx context.Context, err error) Verdict {
	switch {
	case ended(ctx, err):
		return Unavailable
	case !engine.IsStoreError(err):
		return Failed
	case c.local != nil || c.policy == FailClosed:
		return Unavailable
	}
	return Passed
}

// Peek returns the decision a request of cost would get under limit for
// key, spending nothing: engine.Engine.Peek, with a store error counted and
// logged under name as Decide's are.
func (c *Decider) Peek(ctx context.Context, name string, limit engine.Limit, key string, cost int64) (algo.Decision, error) {
	d, err := c.eng.Peek(ctx, limit, key, cost)
	if err != nil && !ended(ctx, err) && engine.IsStoreError(err) {
		c.storeError(name, c.policy, err)
	}
	return d, err
}

// observe tells Metrics of one request's decision in a batch: spent (an
// allowed decision that spent) or denied. One that allowed but did not
// spend (another denied) is not told; a soft request's denial is a
// would-be denial, neither a denial nor a local decision.
func (c *Decider) observe(name string, spent, allowed, soft bool, cost int64, elapsed time.Duration, local bool) {
	switch {
	case spent:
		c.metrics.ObserveDecisionCost(name, true, cost, elapsed)
	case allowed:
		return
	case soft:
		if c.shadowObs != nil {
			c.shadowObs.ObserveShadowDenial(name, cost, elapsed)
		}
		return
	default:
		c.metrics.ObserveDecisionCost(name, false, cost, elapsed)
	}
	if local && c.localObs != nil {
		c.localObs.ObserveLocalDecision(name, spent)
	}
}

// Pick returns the index of the decision among n a door's answer reports,
// or -1 when of says none may be (ok false for each): when over (the
// request is refused), the refusing one (Allowed false) with the longest
// RetryAfter, else the one with the least Remaining; the first of those
// tied.
func Pick(n int, over bool, of func(i int) (d algo.Decision, ok bool)) int {
	p := -1
	var pd algo.Decision
	for i := range n {
		d, ok := of(i)
		switch {
		case !ok:
			continue
		case p < 0:
		case over && d.Allowed != pd.Allowed:
			if d.Allowed {
				continue
			}
		case over && !d.Allowed:
			if d.RetryAfter <= pd.RetryAfter {
				continue
			}
		case d.Remaining >= pd.Remaining:
			continue
		}
		p, pd = i, d
	}
	return p
}

// ended reports whether err is the engine's for ctx having ended (its
// deadline passed, or it was cancelled) before a decision was made.
func ended(ctx context.Context, err error) bool {
	cerr := ctx.Err()
	return cerr != nil && errors.Is(err, cerr)
}

// storeError counts a store error under the named limit and the policy
// that applies, and logs it, at most one line a second; the line says how
// many were not logged since the previous one.
func (c *Decider) storeError(name string, policy StoreErrorPolicy, err error) {
	if c.metrics != nil {
		c.metrics.ObserveStoreError(name, policy)
	}
	if ok, suppressed := c.storeLog.Let(time.Now().UnixNano()); ok {
		c.log.Warn(c.name+": rate limit store error",
			"rule", name, "policy", string(policy), "err", err, "suppressed", suppressed)
	}
}
