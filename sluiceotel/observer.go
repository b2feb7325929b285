package sluiceotel

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-go/sluice"
)

// ScopeName is the instrumentation scope of the Observer's meter: the
// package's import path.
const ScopeName = "github.com/sluice-go/sluice/sluiceotel"

// The metrics' names. MetricRequests and MetricActiveLeases are ASP.NET
// Core's; the others are Sluice's own.
const (
	// MetricRequests counts decisions, per rule and result.
	MetricRequests = "aspnetcore.rate_limiting.requests"
	// MetricSpent sums the cost the allowed decisions spent, per rule.
	MetricSpent = "sluice.rate_limiting.spent"
	// MetricDecisionDuration is the time the engine took to decide, in
	// seconds, per rule.
	MetricDecisionDuration = "sluice.rate_limiting.decision.duration"
	// MetricStoreErrors counts store errors, per rule and the store-error
	// policy that then applied.
	MetricStoreErrors = "sluice.rate_limiting.store_errors"
	// MetricLocalDecisions counts the decisions made in-process under
	// sluice.FailLocal, per rule and result.
	MetricLocalDecisions = "sluice.rate_limiting.local_decisions"
	// MetricShadowDenials counts the would-be denials of shadow rules, per
	// rule.
	MetricShadowDenials = "sluice.rate_limiting.shadow_denials"
	// MetricSettles counts the reservations of rules with settle
	// (sluice.Rule.Settle), per rule and AttrSettleResult.
	MetricSettles = "sluice.rate_limiting.settles"
	// MetricSettledUnits sums the units the settles charged beyond the
	// estimates or refunded of them, per rule and AttrSettleKind.
	MetricSettledUnits = "sluice.rate_limiting.settled_units"
	// MetricActiveLeases is the slots of concurrency rules this process
	// holds, per rule: ASP.NET Core's count of a concurrency limiter's
	// leases held.
	MetricActiveLeases = "aspnetcore.rate_limiting.active_request_leases"
	// MetricExpiredLeases counts the releases of a concurrency rule's slot
	// that freed nothing, the lease having ended (max_hold) first, per
	// rule.
	MetricExpiredLeases = "sluice.rate_limiting.expired_leases"
)

// The attributes' keys. Policy and Result are ASP.NET Core's.
const (
	// AttrPolicy is the name of the rule that decided.
	AttrPolicy attribute.Key = "aspnetcore.rate_limiting.policy"
	// AttrResult is ResultAcquired or ResultEndpointLimiter.
	AttrResult attribute.Key = "aspnetcore.rate_limiting.result"
	// AttrOnStoreError is the store-error policy that applied to a store
	// error: "open", "closed" or "local" (sluice.StoreErrorPolicy).
	AttrOnStoreError attribute.Key = "sluice.rate_limiting.on_store_error"
	// AttrSettleResult is "settled" for a reservation settled with the
	// actual cost, "unsettled" for one whose estimate stood.
	AttrSettleResult attribute.Key = "sluice.rate_limiting.settle_result"
	// AttrSettleKind is "charged" or "refunded".
	AttrSettleKind attribute.Key = "sluice.rate_limiting.settle_kind"

	// AttrVerdict is the span event's sluice.Verdict: "unlimited",
	// "passed", "allowed", "denied", "unidentified", "unavailable",
	// "failed".
	AttrVerdict attribute.Key = "sluice.rate_limiting.verdict"
	// AttrLimit is the capacity of the rule the answer reports.
	AttrLimit attribute.Key = "sluice.rate_limiting.limit"
	// AttrRemaining is what is left of it after the decision.
	AttrRemaining attribute.Key = "sluice.rate_limiting.remaining"
	// AttrRetryAfter is how long a denied caller should wait, in seconds.
	AttrRetryAfter attribute.Key = "sluice.rate_limiting.retry_after"
	// AttrDelay is how long an allowed request waits before it goes on
	// (a leaky bucket's), in seconds; absent when zero.
	AttrDelay attribute.Key = "sluice.rate_limiting.delay"
	// AttrShadowPolicy is the name of the shadow rule whose decision the
	// door reports, when a shadow rule decided the request.
	AttrShadowPolicy attribute.Key = "sluice.rate_limiting.shadow_policy"
	// AttrShadowDenied reports that a shadow rule would have denied the
	// request.
	AttrShadowDenied attribute.Key = "sluice.rate_limiting.shadow_denied"
)

// The values of AttrResult.
const (
	// ResultAcquired: the rule admitted the request.
	ResultAcquired = "acquired"
	// ResultEndpointLimiter: the rule denied the request. Every Sluice rule
	// is matched to the request's method and path, so its denial is an
	// endpoint limiter's in ASP.NET Core's terms; Sluice has no separate
	// global limiter (a catch-all rule is a rule like any other).
	ResultEndpointLimiter = "endpoint_limiter"
)

// EventDecision is the name of the span event that tells of a request's
// decision.
const EventDecision = "sluice.rate_limiting.decision"

// DefaultDecisionBuckets are the decision latency histogram's bucket
// boundaries, in seconds, when Options.Buckets is empty: 1µs to about
// 260ms in steps of four, as package metrics' Prometheus histogram.
var DefaultDecisionBuckets = []float64{1e-6, 4e-6, 16e-6, 64e-6, 256e-6, 1.024e-3, 4.096e-3, 16.384e-3, 65.536e-3, 262.144e-3}

// Options configure an Observer. A nil *Options means the defaults.
type Options struct {
	// MeterProvider makes the Observer's instruments; nil means the
	// global one (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider
	// Buckets are the decision latency histogram's bucket boundaries in
	// seconds; empty means DefaultDecisionBuckets.
	Buckets []float64
	// NoSpanEvents, when true, adds no event to the requests' spans: the
	// Observer exports metrics only (ObserveOutcome only tells Next).
	NoSpanEvents bool
	// Next, when not nil, is told everything the Observer is told, before
	// it: package metrics' *Metrics, say, to export to Prometheus as well.
	// Its optional methods (sluice.LocalObserver, ShadowObserver,
	// ContextObserver) are called when it has them.
	Next sluice.Observer
}

// Observer is a sluice.Observer, LocalObserver, ShadowObserver,
// SettleObserver, SlotObserver and ContextObserver that records what a
// door decides through OpenTelemetry.
//
// Its metrics, each with AttrPolicy (the rule's name):
//
//	aspnetcore.rate_limiting.requests        counter   {request}  + AttrResult
//	sluice.rate_limiting.spent               counter   {cost}
//	sluice.rate_limiting.decision.duration   histogram s
//	sluice.rate_limiting.store_errors        counter   {error}    + AttrOnStoreError
//	sluice.rate_limiting.local_decisions     counter   {request}  + AttrResult
//	sluice.rate_limiting.shadow_denials      counter   {request}
//	sluice.rate_limiting.settles             counter   {reservation}  + AttrSettleResult
//	sluice.rate_limiting.settled_units       counter   {cost}     + AttrSettleKind
//	aspnetcore.rate_limiting.active_request_leases  up-down counter  {request}
//	sluice.rate_limiting.expired_leases      counter   {lease}
//
// They count what package metrics counts for Prometheus, the same way:
// one decision per rule (in all mode, a request two rules admit counts
// once under each; where one rule denies it, only the denying rules
// count), a shadow rule's would-be denial in shadow_denials and not in
// requests, a local decision in requests and in local_decisions. ASP.NET
// Core counts one per request under its endpoint's policy; it has no
// shadow or local decisions. Of its lease metrics, active_request_leases
// counts the slots of concurrency rules (algo.ConcurrencyName) this
// process holds; request_lease.duration, queued_requests and
// request.time_in_queue are not recorded: nothing queues.
//
// On each request whose context holds a recording span, it adds the event
// EventDecision with AttrVerdict; AttrPolicy and AttrResult when a rule
// decided; AttrLimit and AttrRemaining when it admitted or denied the
// request; AttrRetryAfter when it denied it, AttrDelay when it delays it;
// AttrShadowPolicy and AttrShadowDenied when a shadow rule decided it.
//
// The metric methods take no lock and allocate nothing once a rule has
// been seen (each rule's attribute sets are made once, found through a
// copy-on-write map read with one atomic load); what the instruments cost
// beyond that is the MeterProvider's. Rule names come from the
// configuration, so their number is bounded.
//
// Make one with New. It is safe for concurrent use.
type Observer struct {
	rules atomic.Pointer[map[string]*ruleAttrs] // read on the hot path; replaced whole under mu
	mu    sync.Mutex                            // serialises additions to rules

	requests, spent, storeErrors, local, shadow metric.Int64Counter
	settles, settledUnits, expiredLeases        metric.Int64Counter
	activeLeases                                metric.Int64UpDownCounter
	duration                                    metric.Float64Histogram

	spans bool
	next  sluice.Observer
	// next's optional methods, when it has them
	nextLocal  sluice.LocalObserver
	nextShadow sluice.ShadowObserver
	nextCtx    sluice.ContextObserver
	nextSettle sluice.SettleObserver
	nextSlot   sluice.SlotObserver
}

// Observer is every kind of observer a door knows.
var (
	_ sluice.LocalObserver   = (*Observer)(nil)
	_ sluice.ShadowObserver  = (*Observer)(nil)
	_ sluice.ContextObserver = (*Observer)(nil)
	_ sluice.SettleObserver  = (*Observer)(nil)
	_ sluice.SlotObserver    = (*Observer)(nil)
)

// ruleAttrs are one rule's measurement options, made once.
type ruleAttrs struct {
	name                     string
	policy, acquired, denied []metric.AddOption
	storeErr                 [3][]metric.AddOption // by storeErrIndex
	settled, unsettled       []metric.AddOption    // AttrSettleResult
	charged, refunded        []metric.AddOption    // AttrSettleKind
	record                   []metric.RecordOption // AttrPolicy alone
}

// New returns an Observer whose instruments come from opts.MeterProvider.
// It fails when the provider cannot make one of them.
func New(opts *Options) (*Observer, error) {
	if opts == nil {
		opts = &Options{}
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	buckets := DefaultDecisionBuckets
	if len(opts.Buckets) > 0 {
		buckets = opts.Buckets
	}
	m := mp.Meter(ScopeName)
	o := &Observer{spans: !opts.NoSpanEvents, next: opts.Next}
	o.nextLocal, _ = opts.Next.(sluice.LocalObserver)
	o.nextShadow, _ = opts.Next.(sluice.ShadowObserver)
	o.nextCtx, _ = opts.Next.(sluice.ContextObserver)
	o.nextSettle, _ = opts.Next.(sluice.SettleObserver)
	o.nextSlot, _ = opts.Next.(sluice.SlotObserver)
	var err error
	if o.requests, err = m.Int64Counter(MetricRequests, metric.WithUnit("{request}"),
		metric.WithDescription("Number of requests decided under a rate limiting rule (policy), by result.")); err != nil {
		return nil, err
	}
	if o.spent, err = m.Int64Counter(MetricSpent, metric.WithUnit("{cost}"),
		metric.WithDescription("Cost spent by the requests a rate limiting rule admitted.")); err != nil {
		return nil, err
	}
	if o.duration, err = m.Float64Histogram(MetricDecisionDuration, metric.WithUnit("s"),
		metric.WithDescription("Time the rate limit engine took to decide, per rule."),
		metric.WithExplicitBucketBoundaries(slices.Clone(buckets)...)); err != nil {
		return nil, err
	}
	if o.storeErrors, err = m.Int64Counter(MetricStoreErrors, metric.WithUnit("{error}"),
		metric.WithDescription("Rate limit store errors, by rule and the store error policy that applied.")); err != nil {
		return nil, err
	}
	if o.local, err = m.Int64Counter(MetricLocalDecisions, metric.WithUnit("{request}"),
		metric.WithDescription("Decisions made in-process because the store failed (policy local), by rule and result.")); err != nil {
		return nil, err
	}
	if o.shadow, err = m.Int64Counter(MetricShadowDenials, metric.WithUnit("{request}"),
		metric.WithDescription("Requests a shadow rule would have denied; they passed.")); err != nil {
		return nil, err
	}
	if o.settles, err = m.Int64Counter(MetricSettles, metric.WithUnit("{reservation}"),
		metric.WithDescription("Reservations of rules with settle, settled with the actual cost after the response, or whose estimate stood.")); err != nil {
		return nil, err
	}
	if o.settledUnits, err = m.Int64Counter(MetricSettledUnits, metric.WithUnit("{cost}"),
		metric.WithDescription("Units the settles after the response charged beyond the estimates, or refunded of them.")); err != nil {
		return nil, err
	}
	if o.activeLeases, err = m.Int64UpDownCounter(MetricActiveLeases, metric.WithUnit("{request}"),
		metric.WithDescription("Slots of concurrency rules this process holds: requests admitted and not yet ended.")); err != nil {
		return nil, err
	}
	if o.expiredLeases, err = m.Int64Counter(MetricExpiredLeases, metric.WithUnit("{lease}"),
		metric.WithDescription("Releases of a concurrency rule's slot that freed nothing: the lease had ended (max_hold) first.")); err != nil {
		return nil, err
	}
	empty := map[string]*ruleAttrs{}
	o.rules.Store(&empty)
	return o, nil
}

// rule returns name's attributes, making them on first sight.
func (o *Observer) rule(name string) *ruleAttrs {
	if r, ok := (*o.rules.Load())[name]; ok {
		return r
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.rules.Load()
	if r, ok := old[name]; ok {
		return r
	}
	p := AttrPolicy.String(name)
	add := func(kv ...attribute.KeyValue) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
	}
	r := &ruleAttrs{
		name:     name,
		policy:   add(p),
		acquired: add(p, AttrResult.String(ResultAcquired)),
		denied:   add(p, AttrResult.String(ResultEndpointLimiter)),
		record:   []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(p))},

		settled:   add(p, AttrSettleResult.String("settled")),
		unsettled: add(p, AttrSettleResult.String("unsettled")),
		charged:   add(p, AttrSettleKind.String("charged")),
		refunded:  add(p, AttrSettleKind.String("refunded")),
	}
	for i, policy := range []sluice.StoreErrorPolicy{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		r.storeErr[i] = add(p, AttrOnStoreError.String(string(policy)))
	}
	rules := make(map[string]*ruleAttrs, len(old)+1)
	for k, v := range old {
		rules[k] = v
	}
	rules[name] = r
	o.rules.Store(&rules)
	return r
}

// storeErrIndex is policy's index in ruleAttrs.storeErr; an unknown policy
// is FailOpen's, as a door reads the empty one.
func storeErrIndex(policy sluice.StoreErrorPolicy) int {
	switch policy {
	case sluice.FailClosed:
		return 1
	case sluice.FailLocal:
		return 2
	}
	return 0
}

// ObserveDecisionCost records one decision under the named rule: in
// MetricRequests, by result; an allowed one's cost, when positive, in
// MetricSpent; d in MetricDecisionDuration.
func (o *Observer) ObserveDecisionCost(rule string, allowed bool, cost int64, d time.Duration) {
	if o.next != nil {
		o.next.ObserveDecisionCost(rule, allowed, cost, d)
	}
	r, ctx := o.rule(rule), context.Background()
	if allowed {
		o.requests.Add(ctx, 1, r.acquired...)
		if cost > 0 {
			o.spent.Add(ctx, cost, r.policy...)
		}
	} else {
		o.requests.Add(ctx, 1, r.denied...)
	}
	o.duration.Record(ctx, d.Seconds(), r.record...)
}

// ObserveStoreError records a store error under the named rule in
// MetricStoreErrors, with the policy that applied.
func (o *Observer) ObserveStoreError(rule string, policy sluice.StoreErrorPolicy) {
	if o.next != nil {
		o.next.ObserveStoreError(rule, policy)
	}
	o.storeErrors.Add(context.Background(), 1, o.rule(rule).storeErr[storeErrIndex(policy)]...)
}

// ObserveLocalDecision records a decision made in-process under the named
// rule in MetricLocalDecisions, by result. (ObserveDecisionCost has
// counted it in MetricRequests too.)
func (o *Observer) ObserveLocalDecision(rule string, allowed bool) {
	if o.nextLocal != nil {
		o.nextLocal.ObserveLocalDecision(rule, allowed)
	}
	r := o.rule(rule)
	if allowed {
		o.local.Add(context.Background(), 1, r.acquired...)
	} else {
		o.local.Add(context.Background(), 1, r.denied...)
	}
}

// ObserveShadowDenial records the named shadow rule's would-be denial in
// MetricShadowDenials, and d in MetricDecisionDuration. The request
// passed: it is not counted in MetricRequests.
func (o *Observer) ObserveShadowDenial(rule string, cost int64, d time.Duration) {
	if o.nextShadow != nil {
		o.nextShadow.ObserveShadowDenial(rule, cost, d)
	}
	r := o.rule(rule)
	o.shadow.Add(context.Background(), 1, r.policy...)
	o.duration.Record(context.Background(), d.Seconds(), r.record...)
}

// ObserveSettle records a settle under the named rule in MetricSettles,
// by result, and the units it charged or refunded in MetricSettledUnits.
func (o *Observer) ObserveSettle(rule string, charged, refunded int64, stands bool) {
	if o.nextSettle != nil {
		o.nextSettle.ObserveSettle(rule, charged, refunded, stands)
	}
	r, ctx := o.rule(rule), context.Background()
	if stands {
		o.settles.Add(ctx, 1, r.unsettled...)
		return
	}
	o.settles.Add(ctx, 1, r.settled...)
	if charged > 0 {
		o.settledUnits.Add(ctx, charged, r.charged...)
	}
	if refunded > 0 {
		o.settledUnits.Add(ctx, refunded, r.refunded...)
	}
}

// ObserveSlots records a slot of the named concurrency rule taken (delta
// 1) or given back (delta -1) in MetricActiveLeases.
func (o *Observer) ObserveSlots(rule string, delta int64) {
	if o.nextSlot != nil {
		o.nextSlot.ObserveSlots(rule, delta)
	}
	o.activeLeases.Add(context.Background(), delta, o.rule(rule).policy...)
}

// ObserveLeaseExpired records, in MetricExpiredLeases, a release under the
// named concurrency rule that freed nothing.
func (o *Observer) ObserveLeaseExpired(rule string) {
	if o.nextSlot != nil {
		o.nextSlot.ObserveLeaseExpired(rule)
	}
	o.expiredLeases.Add(context.Background(), 1, o.rule(rule).policy...)
}

// ObserveOutcome adds the event EventDecision, telling of out, to the span
// in ctx when it is recording (and Options.NoSpanEvents is false).
func (o *Observer) ObserveOutcome(ctx context.Context, out sluice.Outcome) {
	if o.nextCtx != nil {
		o.nextCtx.ObserveOutcome(ctx, out)
	}
	if !o.spans {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(EventDecision, trace.WithAttributes(outcomeAttrs(out)...))
}

// outcomeAttrs returns the span event's attributes for out.
func outcomeAttrs(out sluice.Outcome) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 9)
	kv = append(kv, AttrVerdict.String(out.Verdict.String()))
	if out.Rule != nil {
		kv = append(kv, AttrPolicy.String(out.Rule.Name()))
	}
	switch out.Verdict {
	case sluice.Allowed:
		kv = append(kv, AttrResult.String(ResultAcquired),
			AttrLimit.Int64(out.Decision.Limit), AttrRemaining.Int64(out.Decision.Remaining))
		if out.Delay > 0 {
			kv = append(kv, AttrDelay.Float64(out.Delay.Seconds()))
		}
	case sluice.Denied:
		kv = append(kv, AttrResult.String(ResultEndpointLimiter),
			AttrLimit.Int64(out.Decision.Limit), AttrRemaining.Int64(out.Decision.Remaining),
			AttrRetryAfter.Float64(out.Decision.RetryAfter.Seconds()))
	}
	if out.Shadow != nil {
		kv = append(kv, AttrShadowPolicy.String(out.Shadow.Name()), AttrShadowDenied.Bool(out.ShadowDenied))
	}
	return kv
}
