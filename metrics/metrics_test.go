package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// TestMetricsConcurrentDecisions observes decisions from many goroutines
// (run it under -race) and checks that no count is lost.
func TestMetricsConcurrentDecisions(t *testing.T) {
	m := New(nil)
	const goroutines, each = 16, 1000
	rules := []string{"orders", "search", "catch-all"}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				rule := rules[(g+i)%len(rules)]
				m.ObserveDecisionCost(rule, i%4 != 0, 2, time.Duration(i)*time.Microsecond)
				if i%100 == 0 {
					m.ObserveStoreError(rule, sluice.FailOpen)
				}
			}
		})
	}
	wg.Add(1)
	go func() { // read while writers run
		defer wg.Done()
		for range 50 {
			_ = m.Snapshot()
		}
	}()
	wg.Wait()

	s := m.Snapshot()
	if len(s.Rules) != len(rules) {
		t.Fatalf("%d rules in the snapshot, want %d", len(s.Rules), len(rules))
	}
	var allowed, denied, spent, storeErrs uint64
	for _, r := range s.Rules {
		allowed += r.Allowed
		denied += r.Denied
		spent += r.Spent
		storeErrs += r.StoreErrorsOpen
	}
	const total = goroutines * each
	if allowed != total*3/4 || denied != total/4 {
		t.Errorf("allowed %d denied %d, want %d and %d", allowed, denied, total*3/4, total/4)
	}
	if spent != 2*allowed {
		t.Errorf("spent %d, want %d", spent, 2*allowed)
	}
	if storeErrs != goroutines*each/100 || s.StoreErrorsOpen != storeErrs || s.StoreErrors() != storeErrs {
		t.Errorf("store errors: per rule %d, total open %d, total %d; want %d", storeErrs, s.StoreErrorsOpen, s.StoreErrors(), goroutines*each/100)
	}
	if n := testutil.CollectAndCount(m.Collector(nil), "sluice_decision_duration_seconds"); n != len(rules) {
		t.Errorf("%d latency histograms, want %d", n, len(rules))
	}
}

func TestMetricsSnapshot(t *testing.T) {
	m := New(nil)
	if s := m.Snapshot(); len(s.Rules) != 0 || s.Reloads != 0 || s.ReloadErrors != 0 || s.StoreErrors() != 0 {
		t.Fatalf("new Metrics: snapshot %+v, want zeros", s)
	}
	for range 3 {
		m.ObserveDecision("orders", true, time.Millisecond)
	}
	m.ObserveDecision("orders", false, time.Millisecond)
	m.ObserveDecisionCost("search", true, 5, time.Millisecond)
	m.ObserveDecisionCost("search", false, 5, time.Millisecond)
	m.ObserveStoreError("search", sluice.FailClosed)
	m.ObserveStoreError("search", sluice.FailOpen)
	m.ObserveStoreError("orders", sluice.FailClosed)
	m.ObserveReload(nil)
	m.ObserveReload(errors.New("bad rule"))
	m.ObserveReload(nil)

	s := m.Snapshot()
	if s.Rules[0].Name != "orders" || s.Rules[1].Name != "search" {
		t.Errorf("rules %q, %q: want sorted by name", s.Rules[0].Name, s.Rules[1].Name)
	}
	want := map[string]RuleSnapshot{
		"orders": {Name: "orders", Allowed: 3, Denied: 1, DeniedRatio: 0.25, Spent: 3, StoreErrorsClosed: 1},
		"search": {Name: "search", Allowed: 1, Denied: 1, DeniedRatio: 0.5, Spent: 5, StoreErrorsOpen: 1, StoreErrorsClosed: 1},
	}
	for name, w := range want {
		got, ok := s.Rule(name)
		if !ok || got != w {
			t.Errorf("sluice.Rule(%q) = %+v, %v; want %+v", name, got, ok, w)
		}
	}
	if _, ok := s.Rule("nope"); ok {
		t.Error(`sluice.Rule("nope") found`)
	}
	if s.StoreErrorsOpen != 1 || s.StoreErrorsClosed != 2 || s.StoreErrors() != 3 {
		t.Errorf("store errors open %d closed %d total %d, want 1, 2, 3", s.StoreErrorsOpen, s.StoreErrorsClosed, s.StoreErrors())
	}
	if s.Reloads != 2 || s.ReloadErrors != 1 {
		t.Errorf("reloads %d, errors %d; want 2 and 1", s.Reloads, s.ReloadErrors)
	}
}

func TestMetricsDeniedRatio(t *testing.T) {
	m := New(nil)
	m.ObserveStoreError("quiet", sluice.FailOpen) // counters but no decision
	for i := range 10 {
		m.ObserveDecision("busy", i < 3, 0)
	}
	for range 4 {
		m.ObserveDecision("shut", false, 0)
	}
	s := m.Snapshot()
	for name, want := range map[string]float64{"quiet": 0, "busy": 0.7, "shut": 1} {
		r, _ := s.Rule(name)
		if math.Abs(r.DeniedRatio-want) > 1e-12 {
			t.Errorf("%s: denied ratio %v, want %v", name, r.DeniedRatio, want)
		}
	}
}

func TestMetricsNilIsNoop(t *testing.T) {
	var m *Metrics
	m.ObserveDecision("x", true, time.Second)
	m.ObserveDecisionCost("x", true, 3, time.Second)
	m.ObserveStoreError("x", sluice.FailClosed)
	m.ObserveReload(nil)
	m.InitRuleset(nil)
}

func TestMetricsInitRuleset(t *testing.T) {
	rs, err := sluice.NewRuleset([]sluice.Rule{
		{Name: "orders", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: algo.FixedWindowName, Limit: 5, Window: time.Minute},
	}, &sluice.Rule{Name: "catch-all", Scope: sluice.ScopeIP, Algorithm: algo.FixedWindowName, Limit: 100, Window: time.Minute}, "")
	if err != nil {
		t.Fatal(err)
	}
	m := New(nil)
	m.InitRuleset(rs)
	s := m.Snapshot()
	if len(s.Rules) != 2 || s.Rules[0].Name != "catch-all" || s.Rules[1].Name != "orders" {
		t.Fatalf("rules after InitRuleset: %+v", s.Rules)
	}
	c := m.Collector(nil)
	if got := testutil.ToFloat64(collectOne(t, c, "sluice_decisions_total", "rule=orders", "decision=denied")); got != 0 {
		t.Errorf("orders denied = %v, want 0", got)
	}
}

// TestMetricsCollector scrapes the collector over an engine on the memory
// backend after a few decisions.
func TestMetricsCollector(t *testing.T) {
	clock := engine.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	e, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	rs, err := sluice.NewRuleset([]sluice.Rule{
		{Name: "orders", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: algo.FixedWindowName, Limit: 2, Window: time.Minute},
	}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	orders := rs.Rule("orders")

	m := New(&Options{Buckets: []float64{0.001, 0.01}})
	for _, user := range []string{"ann", "ann", "ann", "bob", "cy"} {
		d, err := e.Apply(context.Background(), orders.Limit(), user, orders.Cost())
		if err != nil {
			t.Fatal(err)
		}
		m.ObserveDecisionCost(orders.Name(), d.Allowed, orders.Cost(), 5*time.Millisecond)
	}
	m.ObserveStoreError("orders", sluice.FailOpen)
	m.ObserveStoreError("orders", sluice.FailLocal)
	m.ObserveLocalDecision("orders", false)
	m.ObserveReload(nil)
	m.ObserveReload(fmt.Errorf("line 3: bad"))

	c := m.Collector(e)
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP sluice_decisions_total Decisions made under each rule, by outcome.
# TYPE sluice_decisions_total counter
sluice_decisions_total{decision="allowed",rule="orders"} 4
sluice_decisions_total{decision="denied",rule="orders"} 1
# HELP sluice_cost_spent_total Total cost spent by the requests each rule allowed.
# TYPE sluice_cost_spent_total counter
sluice_cost_spent_total{rule="orders"} 4
# HELP sluice_store_errors_total Store errors met while deciding under each rule, by the policy that applied (open: passed, closed: refused, local: decided in-process).
# TYPE sluice_store_errors_total counter
sluice_store_errors_total{policy="local",rule="orders"} 1
sluice_store_errors_total{policy="open",rule="orders"} 1
# HELP sluice_local_decisions_total Decisions made in-process, on the rule's share of the fleet, because the store failed (on_store_error: local); also counted in sluice_decisions_total.
# TYPE sluice_local_decisions_total counter
sluice_local_decisions_total{decision="allowed",rule="orders"} 0
sluice_local_decisions_total{decision="denied",rule="orders"} 1
# HELP sluice_config_reloads_total Configuration reloads, by result; a failed reload keeps the previous configuration.
# TYPE sluice_config_reloads_total counter
sluice_config_reloads_total{result="error"} 1
sluice_config_reloads_total{result="ok"} 1
# HELP sluice_decision_duration_seconds Time taken to decide a request under a rule, store included.
# TYPE sluice_decision_duration_seconds histogram
sluice_decision_duration_seconds_bucket{rule="orders",le="0.001"} 0
sluice_decision_duration_seconds_bucket{rule="orders",le="0.01"} 5
sluice_decision_duration_seconds_bucket{rule="orders",le="+Inf"} 5
sluice_decision_duration_seconds_sum{rule="orders"} 0.025
sluice_decision_duration_seconds_count{rule="orders"} 5
# HELP sluice_keys Keys held in memory by the engine.
# TYPE sluice_keys gauge
sluice_keys 3
# HELP sluice_evictions_total Expired keys removed from memory.
# TYPE sluice_evictions_total counter
sluice_evictions_total 0
# HELP sluice_corrupt_records_total Stored records that did not decode and were treated as absent.
# TYPE sluice_corrupt_records_total counter
sluice_corrupt_records_total 0
`), "sluice_decisions_total", "sluice_cost_spent_total", "sluice_store_errors_total", "sluice_local_decisions_total",
		"sluice_config_reloads_total", "sluice_decision_duration_seconds", "sluice_keys",
		"sluice_evictions_total", "sluice_corrupt_records_total"); err != nil {
		t.Error(err)
	}
	if got, want := testutil.ToFloat64(collectOne(t, c, "sluice_keys")), float64(e.Len()); got != want {
		t.Errorf("sluice_keys = %v, want engine.Len() = %v", got, want)
	}
	if got := testutil.ToFloat64(collectOne(t, c, "sluice_store_healthy")); got != 1 {
		t.Errorf("sluice_store_healthy = %v with nothing failing, want 1", got)
	}
	for _, name := range []string{"sluice_flushes_total", "sluice_flush_errors_total", "sluice_flush_duration_seconds_total",
		"sluice_commits_total", "sluice_commit_errors_total", "sluice_store_healthy", "sluice_store_failures_total",
		"sluice_dirty_records", "sluice_engine_store_errors_total"} {
		if n := testutil.CollectAndCount(c, name); n != 1 {
			t.Errorf("%s: %d series, want 1", name, n)
		}
	}

	// The collector registers cleanly (Describe and Collect agree) and
	// passes the registry's lint.
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestMetricsCollectorNilEngine checks that the engine's metrics are left
// out without an engine.
func TestMetricsCollectorNilEngine(t *testing.T) {
	m := New(nil)
	m.ObserveDecision("orders", true, time.Microsecond)
	c := m.Collector(nil)
	if n := testutil.CollectAndCount(c, "sluice_keys", "sluice_flushes_total", "sluice_dirty_records"); n != 0 {
		t.Errorf("%d engine series without an engine, want 0", n)
	}
	// decisions (2) + cost (1) + shadow denials (1) + reloads (2) + histogram (1)
	if n := testutil.CollectAndCount(c); n != 7 {
		t.Errorf("%d series, want 7", n)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
}

func TestMetricsReloads(t *testing.T) {
	m := New(nil)
	c := m.Collector(nil)
	for range 3 {
		m.ObserveReload(nil)
	}
	m.ObserveReload(errors.New("bad"))
	if got := testutil.ToFloat64(collectOne(t, c, "sluice_config_reloads_total", "result=ok")); got != 3 {
		t.Errorf("ok reloads = %v, want 3", got)
	}
	if got := testutil.ToFloat64(collectOne(t, c, "sluice_config_reloads_total", "result=error")); got != 1 {
		t.Errorf("failed reloads = %v, want 1", got)
	}
	if s := m.Snapshot(); s.Reloads != 3 || s.ReloadErrors != 1 {
		t.Errorf("snapshot reloads %d errors %d, want 3 and 1", s.Reloads, s.ReloadErrors)
	}
}

// collectOne returns a collector of the single series of c named name whose
// labels are labels, given as "name=value" pairs.
func collectOne(t *testing.T, c prometheus.Collector, name string, labels ...string) prometheus.Collector {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var found []prometheus.Metric
	for met := range ch {
		if !strings.Contains(met.Desc().String(), `fqName: "`+name+`"`) {
			continue
		}
		var pb dto.Metric
		if err := met.Write(&pb); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, lp := range pb.GetLabel() {
			got = append(got, lp.GetName()+"="+lp.GetValue())
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(labels))
		if slices.Equal(got, want) {
			found = append(found, met)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%q: %d series, want 1", name, labels, len(found))
	}
	return fixed{found[0]}
}

// fixed is a collector of one metric.
type fixed struct{ m prometheus.Metric }

func (f fixed) Describe(ch chan<- *prometheus.Desc) { ch <- f.m.Desc() }
func (f fixed) Collect(ch chan<- prometheus.Metric) { ch <- f.m }

func BenchmarkObserveDecision(b *testing.B) {
	m := New(nil)
	rules := []string{"orders-write", "search", "catch-all", "reads"}
	for _, r := range rules {
		m.ObserveDecision(r, true, 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.ObserveDecision(rules[i&3], i&7 != 0, time.Duration(i&1023)*time.Microsecond)
			i++
		}
	})
}

// Store errors under the local policy and the local decisions reach the
// snapshot, per rule and in all.
func TestMetricsLocal(t *testing.T) {
	m := New(nil)
	for range 3 {
		m.ObserveStoreError("orders", sluice.FailLocal)
	}
	m.ObserveStoreError("orders", sluice.FailClosed)
	m.ObserveLocalDecision("orders", true)
	m.ObserveLocalDecision("orders", true)
	m.ObserveLocalDecision("orders", false)
	s := m.Snapshot()
	r, ok := s.Rule("orders")
	if !ok || r.StoreErrorsLocal != 3 || r.StoreErrorsClosed != 1 || r.LocalAllowed != 2 || r.LocalDenied != 1 {
		t.Errorf("rule snapshot %+v, want 3 local and 1 closed store errors, 2 allowed and 1 denied locally", r)
	}
	if s.StoreErrorsLocal != 3 || s.StoreErrors() != 4 {
		t.Errorf("snapshot %+v, want 3 local store errors of 4", s)
	}
	var nilM *Metrics
	nilM.ObserveLocalDecision("orders", true) // a no-op, as every Observe method
}

// A shadow rule's would-be denials are counted apart: in ShadowDenied and
// sluice_shadow_denials_total, not as denied decisions, while its allowed
// decisions are counted as any rule's; the latency of both is observed.
func TestMetricsShadowDenials(t *testing.T) {
	m := New(&Options{Buckets: []float64{0.001}})
	m.ObserveDecisionCost("trial", true, 3, time.Millisecond/2)
	m.ObserveShadowDenial("trial", 3, time.Millisecond/2)
	m.ObserveShadowDenial("trial", 3, time.Millisecond/2)
	m.ObserveDecisionCost("enforced", false, 1, time.Millisecond/2)
	r, ok := m.Snapshot().Rule("trial")
	if !ok || r.Allowed != 1 || r.Denied != 0 || r.Spent != 3 || r.ShadowDenied != 2 || r.DeniedRatio != 0 {
		t.Errorf("trial snapshot %+v, want 1 allowed spending 3, 0 denied, 2 shadow denials", r)
	}
	if err := testutil.CollectAndCompare(m.Collector(nil), strings.NewReader(`
# HELP sluice_decisions_total Decisions made under each rule, by outcome.
# TYPE sluice_decisions_total counter
sluice_decisions_total{decision="allowed",rule="enforced"} 0
sluice_decisions_total{decision="denied",rule="enforced"} 1
sluice_decisions_total{decision="allowed",rule="trial"} 1
sluice_decisions_total{decision="denied",rule="trial"} 0
# HELP sluice_shadow_denials_total Requests a shadow rule (shadow: true) would have denied; they passed, spent nothing under the rule and are not counted in sluice_decisions_total.
# TYPE sluice_shadow_denials_total counter
sluice_shadow_denials_total{rule="enforced"} 0
sluice_shadow_denials_total{rule="trial"} 2
# HELP sluice_decision_duration_seconds Time taken to decide a request under a rule, store included.
# TYPE sluice_decision_duration_seconds histogram
sluice_decision_duration_seconds_bucket{rule="enforced",le="0.001"} 1
sluice_decision_duration_seconds_bucket{rule="enforced",le="+Inf"} 1
sluice_decision_duration_seconds_sum{rule="enforced"} 0.0005
sluice_decision_duration_seconds_count{rule="enforced"} 1
sluice_decision_duration_seconds_bucket{rule="trial",le="0.001"} 3
sluice_decision_duration_seconds_bucket{rule="trial",le="+Inf"} 3
sluice_decision_duration_seconds_sum{rule="trial"} 0.0015
sluice_decision_duration_seconds_count{rule="trial"} 3
`), "sluice_decisions_total", "sluice_shadow_denials_total", "sluice_decision_duration_seconds"); err != nil {
		t.Error(err)
	}
	var nilM *Metrics
	nilM.ObserveShadowDenial("trial", 1, 0) // a no-op, as every Observe method
}

// TestMetricsSlots: a concurrency rule's slot gauge follows the slots taken
// and given back, expired leases are counted, and neither series exists
// for a rule that never took a slot.
func TestMetricsSlots(t *testing.T) {
	m := New(nil)
	m.ObserveDecisionCost("orders", true, 1, time.Microsecond)
	for range 3 {
		m.ObserveSlots("chat", 1)
	}
	m.ObserveSlots("chat", -1)
	m.ObserveLeaseExpired("chat")
	c := m.Collector(nil)
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP sluice_slots_in_use Slots of each concurrency rule this process holds: requests admitted and not yet ended.
# TYPE sluice_slots_in_use gauge
sluice_slots_in_use{rule="chat"} 2
# HELP sluice_leases_expired_total Releases of a concurrency rule's slot that freed nothing: the lease had ended (max_hold) before the request did, and the slot had come back by itself.
# TYPE sluice_leases_expired_total counter
sluice_leases_expired_total{rule="chat"} 1
`), "sluice_slots_in_use", "sluice_leases_expired_total"); err != nil {
		t.Error(err)
	}
	s, _ := m.Snapshot().Rule("chat")
	if s.SlotsInUse != 2 || s.LeasesExpired != 1 {
		t.Errorf("snapshot: %d slots in use, %d leases expired; want 2, 1", s.SlotsInUse, s.LeasesExpired)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
}
