package metrics

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
)

// DefaultDecisionBuckets are the upper bounds, in seconds, of the decision
// latency histogram when Options.Buckets is empty: 1µs to about
// 260ms in steps of four, from an in-memory decision to a synchronous
// commit on a slow disk.
var DefaultDecisionBuckets = prometheus.ExponentialBuckets(1e-6, 4, 10)

// Options configure a Metrics. A nil *Options means the defaults.
type Options struct {
	// Buckets are the decision latency histogram's upper bounds in
	// seconds; empty means DefaultDecisionBuckets.
	Buckets []float64
}

// Metrics is a sluice.LocalObserver, ShadowObserver, SettleObserver and
// SlotObserver.
var (
	_ sluice.LocalObserver  = (*Metrics)(nil)
	_ sluice.ShadowObserver = (*Metrics)(nil)
	_ sluice.SettleObserver = (*Metrics)(nil)
	_ sluice.SlotObserver   = (*Metrics)(nil)
)

// Metrics counts what a gateway decides: per rule, the allowed and denied
// decisions, the cost the allowed ones spent, their latency and the store
// errors met, by the policy that applied, the decisions made locally
// under the local policy and the would-be denials of shadow rules; and the
// configuration reloads. Snapshot reads the counters as
// a plain value; Collector exposes them, with the engine's own counters, to
// Prometheus.
//
// The Observe methods are made for the request path: they take no lock and
// do not allocate once a rule has been seen (each rule's counters are
// atomics, found through a copy-on-write map read with one atomic load).
// Call them after engine.Engine.Apply or ApplyAll has returned, never from
// code running under an engine stripe lock; they never call back into the
// engine, so a slow metrics consumer cannot hold up a decision.
//
// A rule's counters live from its first observation (or InitRuleset) until
// the Metrics is dropped, across reloads: a counter never goes backwards.
// Rule names come from the configuration, so their number is bounded.
//
// Make one with New. All methods are safe for concurrent use, and the
// Observe methods are no-ops on a nil *Metrics.
type Metrics struct {
	rules atomic.Pointer[map[string]*ruleMetrics] // read on the hot path; replaced whole under mu
	mu    sync.Mutex                              // serialises additions to rules

	latency *prometheus.HistogramVec // decision latency, by rule

	storeErrOpen, storeErrClosed, storeErrLocal atomic.Uint64 // store errors of every rule, by policy
	reloadsOK, reloadErrs                       atomic.Uint64
}

// ruleMetrics are one rule's counters.
type ruleMetrics struct {
	name                                        string
	allowed, denied, spent                      atomic.Uint64
	storeErrOpen, storeErrClosed, storeErrLocal atomic.Uint64
	localAllowed, localDenied                   atomic.Uint64       // decisions made in-process (sluice.FailLocal)
	shadowDenied                                atomic.Uint64       // would-be denials of a shadow rule
	settled, unsettled, charged, refunded       atomic.Uint64       // settles after the response (sluice.Settle)
	slots                                       atomic.Int64        // slots of a concurrency rule this process holds
	leasesExpired                               atomic.Uint64       // releases that freed nothing: the lease had ended
	slotted                                     atomic.Bool         // the rule has taken a slot: its slot series are exported
	latency                                     prometheus.Observer // the rule's child of Metrics.latency
}

// New returns an empty Metrics.
func New(opts *Options) *Metrics {
	buckets := DefaultDecisionBuckets
	if opts != nil && len(opts.Buckets) > 0 {
		buckets = slices.Clone(opts.Buckets)
	}
	m := &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_decision_duration_seconds",
			Help:    "Time taken to decide a request under a rule, store included.",
			Buckets: buckets,
		}, []string{"rule"}),
	}
	m.rules.Store(&map[string]*ruleMetrics{})
	return m
}

// rule returns the counters of the named rule, creating them on first use.
func (m *Metrics) rule(name string) *ruleMetrics {
	if r, ok := (*m.rules.Load())[name]; ok {
		return r
	}
	return m.addRule(name)
}

// addRule is rule's slow path: it copies the map with the new rule added.
func (m *Metrics) addRule(name string) *ruleMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.rules.Load()
	if r, ok := old[name]; ok {
		return r
	}
	name = strings.Clone(name) // keep no reference to the caller's buffer
	r := &ruleMetrics{name: name, latency: m.latency.WithLabelValues(name)}
	next := make(map[string]*ruleMetrics, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name] = r
	m.rules.Store(&next)
	return r
}

// InitRuleset creates the counters of every rule of rs, its default
// included, so that they are exported as zeros before the first request.
// Call it after each reload if series for quiet rules matter; it is never
// required.
func (m *Metrics) InitRuleset(rs *sluice.Ruleset) {
	if m == nil || rs == nil {
		return
	}
	for _, c := range rs.Rules() {
		m.rule(c.Name())
	}
	if d := rs.Default(); d != nil {
		m.rule(d.Name())
	}
}

// ObserveDecision records one decision under the named rule: allowed or
// denied, taking d (measured by the caller around the engine call). An
// allowed decision is counted as spending a cost of 1, the default; use
// ObserveDecisionCost for rules with another cost.
//
// It takes no lock and does not allocate once the rule has been seen. Call
// it after the engine has returned, never under an engine stripe lock.
func (m *Metrics) ObserveDecision(rule string, allowed bool, d time.Duration) {
	m.ObserveDecisionCost(rule, allowed, 1, d)
}

// ObserveDecisionCost is ObserveDecision for a decision whose request cost
// cost: an allowed decision adds cost to the rule's spent total (a denied
// one spends nothing). A cost of zero or less adds nothing.
func (m *Metrics) ObserveDecisionCost(rule string, allowed bool, cost int64, d time.Duration) {
	if m == nil {
		return
	}
	r := m.rule(rule)
	if allowed {
		r.allowed.Add(1)
		if cost > 0 {
			r.spent.Add(uint64(cost))
		}
	} else {
		r.denied.Add(1)
	}
	r.latency.Observe(d.Seconds())
}

// ObserveStoreError records a store error met while deciding a request under
// the named rule, and the policy that then applied: sluice.FailOpen (the
// request passed), sluice.FailClosed (it was refused) or sluice.FailLocal
// (it was decided in-process). A store error is not a decision: it is not
// counted by ObserveDecision's counters (under FailLocal, the local
// decision that follows is). Any other policy value is counted as
// FailOpen, the default.
func (m *Metrics) ObserveStoreError(rule string, policy sluice.StoreErrorPolicy) {
	if m == nil {
		return
	}
	r := m.rule(rule)
	switch policy {
	case sluice.FailClosed:
		r.storeErrClosed.Add(1)
		m.storeErrClosed.Add(1)
	case sluice.FailLocal:
		r.storeErrLocal.Add(1)
		m.storeErrLocal.Add(1)
	default:
		r.storeErrOpen.Add(1)
		m.storeErrOpen.Add(1)
	}
}

// ObserveLocalDecision records that a decision under the named rule was
// made in-process, on the rule's share, because the store failed
// (sluice.FailLocal). The door reports the decision to ObserveDecisionCost
// as well: the local counters are a part of the decision counters, not an
// addition to them.
func (m *Metrics) ObserveLocalDecision(rule string, allowed bool) {
	if m == nil {
		return
	}
	r := m.rule(rule)
	if allowed {
		r.localAllowed.Add(1)
	} else {
		r.localDenied.Add(1)
	}
}

// ObserveShadowDenial records that the named shadow rule would have denied
// a request (sluice.Rule.Shadow): the request passed and spent nothing
// under the rule. It is counted apart from the decisions, so that
// sluice_decisions_total{decision="denied"} counts only requests refused;
// d goes to the decision latency histogram as any decision's does. The
// door reports the rule's allowed decisions to ObserveDecisionCost as
// usual. cost is not counted (nothing was spent).
//
// It takes no lock and does not allocate once the rule has been seen.
func (m *Metrics) ObserveShadowDenial(rule string, cost int64, d time.Duration) {
	if m == nil {
		return
	}
	r := m.rule(rule)
	r.shadowDenied.Add(1)
	r.latency.Observe(d.Seconds())
}

// ObserveSettle records a settle after the response under the named rule
// (sluice.Rule.Settle): the units charged beyond the estimate or refunded
// of it, or, stands true, a reservation left unsettled, its estimate
// standing. It takes no lock and does not allocate once the rule has been
// seen.
func (m *Metrics) ObserveSettle(rule string, charged, refunded int64, stands bool) {
	if m == nil {
		return
	}
	r := m.rule(rule)
	if stands {
		r.unsettled.Add(1)
		return
	}
	r.settled.Add(1)
	if charged > 0 {
		r.charged.Add(uint64(charged))
	}
	if refunded > 0 {
		r.refunded.Add(uint64(refunded))
	}
}

// ObserveSlots records that the process took (delta 1) or gave back
// (delta -1) a slot of the named concurrency rule: the gauge of the slots
// it holds. It takes no lock and does not allocate once the rule has been
// seen.
func (m *Metrics) ObserveSlots(rule string, delta int64) {
	if m == nil {
		return
	}
	r := m.rule(rule)
	r.slots.Add(delta)
	if !r.slotted.Load() {
		r.slotted.Store(true)
	}
}

// ObserveLeaseExpired records a release under the named concurrency rule
// that freed nothing: the lease had ended (its max_hold passed) before the
// request did.
func (m *Metrics) ObserveLeaseExpired(rule string) {
	if m == nil {
		return
	}
	m.rule(rule).leasesExpired.Add(1)
}

// ObserveReload records a configuration reload: a success when err is nil,
// a failure (the previous configuration stays in force) otherwise.
func (m *Metrics) ObserveReload(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reloadErrs.Add(1)
	} else {
		m.reloadsOK.Add(1)
	}
}

// Snapshot is a copy of a Metrics' counters at one moment, for programs that
// do not use Prometheus. Each counter is read atomically, but the counters
// are not read all at once: a decision made during Snapshot may be seen in
// one counter and not yet in another.
type Snapshot struct {
	// Rules are the per-rule counters, sorted by rule name.
	Rules []RuleSnapshot
	// StoreErrorsOpen, StoreErrorsClosed and StoreErrorsLocal count the
	// store errors of every rule, by the policy that applied.
	StoreErrorsOpen, StoreErrorsClosed, StoreErrorsLocal uint64
	// Reloads counts successful configuration reloads, ReloadErrors the
	// failed ones.
	Reloads, ReloadErrors uint64
}

// RuleSnapshot are one rule's counters.
type RuleSnapshot struct {
	// Name is the rule's name.
	Name string
	// Allowed and Denied count the rule's decisions.
	Allowed, Denied uint64
	// DeniedRatio is Denied / (Allowed + Denied), or 0 before the first
	// decision.
	DeniedRatio float64
	// Spent is the total cost of the allowed decisions.
	Spent uint64
	// StoreErrorsOpen, StoreErrorsClosed and StoreErrorsLocal count the
	// rule's store errors, by the policy that applied.
	StoreErrorsOpen, StoreErrorsClosed, StoreErrorsLocal uint64
	// LocalAllowed and LocalDenied count the decisions made in-process
	// under the local policy; they are counted in Allowed and Denied too.
	LocalAllowed, LocalDenied uint64
	// ShadowDenied counts the requests a shadow rule would have denied,
	// which passed; they are not counted in Denied.
	ShadowDenied uint64
	// Settled counts the reservations settled after the response,
	// Unsettled those whose estimate stood; Charged and Refunded the
	// units the settles charged beyond the estimates and refunded of
	// them.
	Settled, Unsettled, Charged, Refunded uint64
	// SlotsInUse is, for a concurrency rule, the slots this process holds
	// now; LeasesExpired counts the releases that freed nothing, the
	// lease having ended (max_hold) before the request did.
	SlotsInUse    int64
	LeasesExpired uint64
}

// StoreErrors returns the store errors of every rule, whatever the policy.
func (s Snapshot) StoreErrors() uint64 {
	return s.StoreErrorsOpen + s.StoreErrorsClosed + s.StoreErrorsLocal
}

// Rule returns the counters of the named rule, and whether it has any.
func (s Snapshot) Rule(name string) (RuleSnapshot, bool) {
	i, ok := slices.BinarySearchFunc(s.Rules, name, func(r RuleSnapshot, name string) int {
		return strings.Compare(r.Name, name)
	})
	if !ok {
		return RuleSnapshot{}, false
	}
	return s.Rules[i], true
}

// Snapshot returns a copy of the counters.
func (m *Metrics) Snapshot() Snapshot {
	rules := m.sortedRules()
	s := Snapshot{
		Rules:             make([]RuleSnapshot, 0, len(rules)),
		StoreErrorsOpen:   m.storeErrOpen.Load(),
		StoreErrorsClosed: m.storeErrClosed.Load(),
		StoreErrorsLocal:  m.storeErrLocal.Load(),
		Reloads:           m.reloadsOK.Load(),
		ReloadErrors:      m.reloadErrs.Load(),
	}
	for _, r := range rules {
		rs := RuleSnapshot{
			Name:              r.name,
			Allowed:           r.allowed.Load(),
			Denied:            r.denied.Load(),
			Spent:             r.spent.Load(),
			StoreErrorsOpen:   r.storeErrOpen.Load(),
			StoreErrorsClosed: r.storeErrClosed.Load(),
			StoreErrorsLocal:  r.storeErrLocal.Load(),
			LocalAllowed:      r.localAllowed.Load(),
			LocalDenied:       r.localDenied.Load(),
			ShadowDenied:      r.shadowDenied.Load(),
			Settled:           r.settled.Load(),
			Unsettled:         r.unsettled.Load(),
			Charged:           r.charged.Load(),
			Refunded:          r.refunded.Load(),
			SlotsInUse:        r.slots.Load(),
			LeasesExpired:     r.leasesExpired.Load(),
		}
		if n := rs.Allowed + rs.Denied; n > 0 {
			rs.DeniedRatio = float64(rs.Denied) / float64(n)
		}
		s.Rules = append(s.Rules, rs)
	}
	return s
}

// sortedRules returns every rule's counters, sorted by name.
func (m *Metrics) sortedRules() []*ruleMetrics {
	cur := *m.rules.Load()
	rules := make([]*ruleMetrics, 0, len(cur))
	for _, r := range cur {
		rules = append(rules, r)
	}
	slices.SortFunc(rules, func(a, b *ruleMetrics) int { return strings.Compare(a.name, b.name) })
	return rules
}

// Collector returns a Prometheus collector of m's counters and, when e is
// not nil, of e's (read from e.Stats at each scrape; e's metrics are left
// out when e is nil). Register it once per registry: two collectors of the
// same Metrics would export the same series twice.
//
// The metrics, all prefixed sluice_:
//
//	decisions_total{rule,decision="allowed|denied"}  counter
//	cost_spent_total{rule}                           counter
//	decision_duration_seconds{rule}                  histogram
//	store_errors_total{rule,policy="open|closed|local"}  counter, once the pair has been seen
//	local_decisions_total{rule,decision="allowed|denied"}  counter, once the rule has decided locally:
//	                                                 the part of decisions_total made in-process
//	                                                 while the store failed (on_store_error: local)
//	shadow_denials_total{rule}                       counter, once the rule has been seen: the requests
//	                                                 a shadow rule (shadow: true) would have denied; they
//	                                                 passed and are not in decisions_total
//	settles_total{rule,result="settled|unsettled"}   counter, once the rule has settled: reservations
//	                                                 settled after the response, or whose estimate stood
//	settled_units_total{rule,kind="charged|refunded"}  counter, once the rule has settled
//	slots_in_use{rule}                               gauge, once the concurrency rule has taken a slot:
//	                                                 the slots this process holds (a fleet's sum is
//	                                                 the slots in flight)
//	leases_expired_total{rule}                       counter, once the rule has taken a slot: releases
//	                                                 that freed nothing, the lease having ended (max_hold)
//	config_reloads_total{result="ok|error"}          counter
//	keys                                             gauge (left out when the backend cannot count)
//	evictions_total                                  counter
//	flushes_total, flush_errors_total                counter
//	flush_duration_seconds_total                     counter
//	commits_total, commit_errors_total               counter
//	store_healthy                                    gauge: 0 while the durable store's writes fail
//	store_failures_total                             counter: episodes of failing writes
//	dirty_records                                    gauge
//	corrupt_records_total                            counter
//	engine_store_errors_total                        counter
//
// A scrape reads atomics and calls e.Stats, which takes no stripe lock.
func (m *Metrics) Collector(e *engine.Engine) prometheus.Collector {
	return &collector{m: m, e: e}
}

// The descriptions of the collector's metrics, but for the latency
// histogram, which describes itself.
var (
	descDecisions = prometheus.NewDesc("sluice_decisions_total",
		"Decisions made under each rule, by outcome.", []string{"rule", "decision"}, nil)
	descSpent = prometheus.NewDesc("sluice_cost_spent_total",
		"Total cost spent by the requests each rule allowed.", []string{"rule"}, nil)
	descStoreErrors = prometheus.NewDesc("sluice_store_errors_total",
		"Store errors met while deciding under each rule, by the policy that applied (open: passed, closed: refused, local: decided in-process).",
		[]string{"rule", "policy"}, nil)
	descLocal = prometheus.NewDesc("sluice_local_decisions_total",
		"Decisions made in-process, on the rule's share of the fleet, because the store failed (on_store_error: local); also counted in sluice_decisions_total.",
		[]string{"rule", "decision"}, nil)
	descShadow = prometheus.NewDesc("sluice_shadow_denials_total",
		"Requests a shadow rule (shadow: true) would have denied; they passed, spent nothing under the rule and are not counted in sluice_decisions_total.",
		[]string{"rule"}, nil)
	descSettles = prometheus.NewDesc("sluice_settles_total",
		"Reservations of rules with settle, settled with the actual cost after the response, or left at their estimate (unsettled: no actual cost found, or the client went away).",
		[]string{"rule", "result"}, nil)
	descSettledUnits = prometheus.NewDesc("sluice_settled_units_total",
		"Units the settles after the response charged beyond the estimates, or refunded of them.",
		[]string{"rule", "kind"}, nil)
	descSlots = prometheus.NewDesc("sluice_slots_in_use",
		"Slots of each concurrency rule this process holds: requests admitted and not yet ended.",
		[]string{"rule"}, nil)
	descLeasesExpired = prometheus.NewDesc("sluice_leases_expired_total",
		"Releases of a concurrency rule's slot that freed nothing: the lease had ended (max_hold) before the request did, and the slot had come back by itself.",
		[]string{"rule"}, nil)
	descReloads = prometheus.NewDesc("sluice_config_reloads_total",
		"Configuration reloads, by result; a failed reload keeps the previous configuration.", []string{"result"}, nil)
	descKeys = prometheus.NewDesc("sluice_keys",
		"Keys held in memory by the engine.", nil, nil)
	descEvictions = prometheus.NewDesc("sluice_evictions_total",
		"Expired keys removed from memory.", nil, nil)
	descFlushes = prometheus.NewDesc("sluice_flushes_total",
		"Batch writes of changed records to the durable store.", nil, nil)
	descFlushErrors = prometheus.NewDesc("sluice_flush_errors_total",
		"Failed batch writes to the durable store.", nil, nil)
	descFlushTime = prometheus.NewDesc("sluice_flush_duration_seconds_total",
		"Total time spent in batch writes to the durable store.", nil, nil)
	descCommits = prometheus.NewDesc("sluice_commits_total",
		"Group commits to the durable store in sync mode.", nil, nil)
	descCommitErrors = prometheus.NewDesc("sluice_commit_errors_total",
		"Failed group commits to the durable store in sync mode.", nil, nil)
	descStoreHealthy = prometheus.NewDesc("sluice_store_healthy",
		"0 while the durable store's writes fail (a flush or commit failed and none has succeeded since; decisions that spend answer store errors), 1 otherwise.", nil, nil)
	descStoreFailures = prometheus.NewDesc("sluice_store_failures_total",
		"Episodes of failing writes to the durable store, each from a failed flush or commit to the next that succeeded.", nil, nil)
	descDirty = prometheus.NewDesc("sluice_dirty_records",
		"Changed records awaiting a write to the durable store.", nil, nil)
	descCorrupt = prometheus.NewDesc("sluice_corrupt_records_total",
		"Stored records that did not decode and were treated as absent.", nil, nil)
	descEngineStoreErrors = prometheus.NewDesc("sluice_engine_store_errors_total",
		"Backend errors the engine returned to its callers.", nil, nil)
)

// collector is what Metrics.Collector returns.
type collector struct {
	m *Metrics
	e *engine.Engine
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descSpent, descStoreErrors, descLocal, descShadow, descSettles, descSettledUnits, descSlots, descLeasesExpired, descReloads} {
		ch <- d
	}
	c.m.latency.Describe(ch)
	if c.e == nil {
		return
	}
	for _, d := range []*prometheus.Desc{descKeys, descEvictions, descFlushes, descFlushErrors,
		descFlushTime, descCommits, descCommitErrors, descStoreHealthy, descStoreFailures,
		descDirty, descCorrupt, descEngineStoreErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	for _, r := range c.m.sortedRules() {
		counter(descDecisions, float64(r.allowed.Load()), r.name, "allowed")
		counter(descDecisions, float64(r.denied.Load()), r.name, "denied")
		counter(descSpent, float64(r.spent.Load()), r.name)
		counter(descShadow, float64(r.shadowDenied.Load()), r.name)
		if n := r.storeErrOpen.Load(); n > 0 {
			counter(descStoreErrors, float64(n), r.name, string(sluice.FailOpen))
		}
		if n := r.storeErrClosed.Load(); n > 0 {
			counter(descStoreErrors, float64(n), r.name, string(sluice.FailClosed))
		}
		if n := r.storeErrLocal.Load(); n > 0 {
			counter(descStoreErrors, float64(n), r.name, string(sluice.FailLocal))
		}
		if s, u := r.settled.Load(), r.unsettled.Load(); s+u > 0 {
			counter(descSettles, float64(s), r.name, "settled")
			counter(descSettles, float64(u), r.name, "unsettled")
			counter(descSettledUnits, float64(r.charged.Load()), r.name, "charged")
			counter(descSettledUnits, float64(r.refunded.Load()), r.name, "refunded")
		}
		if r.slotted.Load() {
			ch <- prometheus.MustNewConstMetric(descSlots, prometheus.GaugeValue, float64(r.slots.Load()), r.name)
			counter(descLeasesExpired, float64(r.leasesExpired.Load()), r.name)
		}
		if a, d := r.localAllowed.Load(), r.localDenied.Load(); a+d > 0 {
			counter(descLocal, float64(a), r.name, "allowed")
			counter(descLocal, float64(d), r.name, "denied")
		}
	}
	counter(descReloads, float64(c.m.reloadsOK.Load()), "ok")
	counter(descReloads, float64(c.m.reloadErrs.Load()), "error")
	c.m.latency.Collect(ch)
	if c.e == nil {
		return
	}
	s := c.e.Stats()
	if s.Keys >= 0 {
		gauge(descKeys, float64(s.Keys))
	}
	counter(descEvictions, float64(s.Evictions))
	counter(descFlushes, float64(s.Flushes))
	counter(descFlushErrors, float64(s.FlushErrors))
	counter(descFlushTime, s.FlushTime.Seconds())
	counter(descCommits, float64(s.Commits))
	counter(descCommitErrors, float64(s.CommitErrors))
	healthy := 1.0
	if s.StoreFailing {
		healthy = 0
	}
	gauge(descStoreHealthy, healthy)
	counter(descStoreFailures, float64(s.StoreFailures))
	gauge(descDirty, float64(s.Dirty))
	counter(descCorrupt, float64(s.CorruptRecords))
	counter(descEngineStoreErrors, float64(s.StoreErrors))
}

// Breaker is what a store's circuit breaker reports (the Redis store's
// Breaker method, say): whether it is open, and its counts since the
// store was opened.
type Breaker struct {
	// Open reports that calls fail at once, but for one probe at a time.
	Open bool
	// Opened counts the times the breaker opened; Rejected the calls it
	// failed without calling the store.
	Opened, Rejected uint64
	// Calls counts the calls that went to the store; Failures those of
	// them that failed.
	Calls, Failures uint64
}

// BreakerCollector returns a Prometheus collector of the breaker read
// reports, called at each scrape. Its metrics, all prefixed sluice_store_:
//
//	breaker_open                   gauge, 1 while the breaker is open
//	breaker_opened_total           counter
//	breaker_rejected_total         counter: calls failed without calling the store
//	calls_total                    counter: calls that went to the store
//	call_failures_total            counter: those of them that failed
func BreakerCollector(read func() Breaker) prometheus.Collector {
	return breakerCollector(read)
}

var (
	descBreakerOpen = prometheus.NewDesc("sluice_store_breaker_open",
		"1 while the store's circuit breaker is open: calls fail at once but for one probe at a time.", nil, nil)
	descBreakerOpened = prometheus.NewDesc("sluice_store_breaker_opened_total",
		"Times the store's circuit breaker opened.", nil, nil)
	descBreakerRejected = prometheus.NewDesc("sluice_store_breaker_rejected_total",
		"Calls the open circuit breaker failed without calling the store.", nil, nil)
	descStoreCalls = prometheus.NewDesc("sluice_store_calls_total",
		"Calls that went to the store (a batch of decisions counts as its decisions).", nil, nil)
	descStoreCallFailures = prometheus.NewDesc("sluice_store_call_failures_total",
		"Calls to the store that failed: timed out, lost their connection or met a server that cannot serve.", nil, nil)
)

type breakerCollector func() Breaker

// Describe implements prometheus.Collector.
func (breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBreakerOpen, descBreakerOpened, descBreakerRejected, descStoreCalls, descStoreCallFailures} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (read breakerCollector) Collect(ch chan<- prometheus.Metric) {
	b := read()
	open := 0.0
	if b.Open {
		open = 1
	}
	ch <- prometheus.MustNewConstMetric(descBreakerOpen, prometheus.GaugeValue, open)
	for _, c := range []struct {
		d *prometheus.Desc
		v uint64
	}{{descBreakerOpened, b.Opened}, {descBreakerRejected, b.Rejected}, {descStoreCalls, b.Calls}, {descStoreCallFailures, b.Failures}} {
		ch <- prometheus.MustNewConstMetric(c.d, prometheus.CounterValue, float64(c.v))
	}
}
