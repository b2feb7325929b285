package sluiceotel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/sluiceotel"
)

var t0 = time.Unix(1_700_000_040, 0)

// The rules of the tests: two orders a minute per user, and a shadow rule
// of one search a minute per user.
var (
	ordersRule = sluice.Rule{Name: "orders", Method: "POST", PathPrefix: "/api/orders",
		Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 2, Window: time.Minute}
	searchShadow = sluice.Rule{Name: "search-trial", PathPrefix: "/api/search",
		Scope: sluice.ScopeUser, Algorithm: "fixed_window", Limit: 1, Window: time.Minute, Shadow: true}
)

// site is a real HTTP server on loopback: a handler that starts a span per
// request (as an OpenTelemetry HTTP instrumentation would), then the
// httplimit middleware with a sluiceotel.Observer, then a mux answering
// 200. Its metrics go to a ManualReader, its spans to a SpanRecorder.
type site struct {
	srv    *httptest.Server
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	faults *faulty.Faults
}

type siteOpts struct {
	obs    sluiceotel.Options
	policy sluice.StoreErrorPolicy
}

func newSite(t *testing.T, o siteOpts) *site {
	t.Helper()
	s := &site{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })

	opts := o.obs
	opts.MeterProvider = mp
	obs, err := sluiceotel.New(&opts)
	if err != nil {
		t.Fatal(err)
	}
	b, faults := faulty.Wrap(memory.New(&memory.Options{SweepInterval: -1}))
	s.faults = faults
	quiet := slog.New(slog.DiscardHandler)
	eng, err := engine.New(b, &engine.Options{Clock: engine.NewFakeClock(t0), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	rs, err := sluice.NewRuleset([]sluice.Rule{ordersRule, searchShadow}, nil, sluice.MatchMostSpecific)
	if err != nil {
		t.Fatal(err)
	}
	cfg := httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), Metrics: obs, OnStoreError: o.policy, Logger: quiet}
	if o.policy == sluice.FailLocal {
		localEng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(t0), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { localEng.Close() })
		if cfg.Local, err = sluice.NewLocalFallback(localEng, 1); err != nil {
			t.Fatal(err)
		}
	}
	limit, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	limited := limit(ok)
	tracer := tp.Tracer("test")
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), r.Method+" "+r.URL.Path)
		defer span.End()
		limited.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// do sends a request as user and returns its status.
func (s *site) do(t *testing.T, method, path, user string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-User-ID", user)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// point is one data point of a collected metric: its attributes and its
// value (a sum's value, a histogram's count).
type point struct {
	attrs attribute.Set
	value int64
}

// collect returns the collected data points by metric name.
func (s *site) collect(t *testing.T) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := make(map[string][]point)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != sluiceotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, sluiceotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic {
					t.Errorf("%s is not monotonic", m.Name)
				}
				for _, dp := range d.DataPoints {
					got[m.Name] = append(got[m.Name], point{dp.Attributes, dp.Value})
				}
			case metricdata.Histogram[float64]:
				if m.Unit != "s" {
					t.Errorf("%s: unit %q, want s", m.Name, m.Unit)
				}
				for _, dp := range d.DataPoints {
					got[m.Name] = append(got[m.Name], point{dp.Attributes, int64(dp.Count)})
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return got
}

// value returns the value of metric's data point whose attributes are
// exactly kv (key, value, …), and whether there is one.
func value(points map[string][]point, metric string, kv ...string) (int64, bool) {
	var want []attribute.KeyValue
	for i := 0; i+1 < len(kv); i += 2 {
		want = append(want, attribute.String(kv[i], kv[i+1]))
	}
	set := attribute.NewSet(want...)
	for _, p := range points[metric] {
		if p.attrs.Equals(&set) {
			return p.value, true
		}
	}
	return 0, false
}

// allowedKeys are the only attribute keys a metric may carry: none names a
// caller.
var allowedKeys = []attribute.Key{sluiceotel.AttrPolicy, sluiceotel.AttrResult, sluiceotel.AttrOnStoreError}

// checkNoCaller fails the test when a metric data point has an attribute
// outside allowedKeys or a value naming one of the users.
func checkNoCaller(t *testing.T, points map[string][]point, users ...string) {
	t.Helper()
	for name, ps := range points {
		for _, p := range ps {
			for _, kv := range p.attrs.ToSlice() {
				if !slices.Contains(allowedKeys, kv.Key) {
					t.Errorf("%s has attribute %s=%s: only %v are allowed", name, kv.Key, kv.Value.Emit(), allowedKeys)
				}
				for _, u := range users {
					if strings.Contains(kv.Value.Emit(), u) {
						t.Errorf("%s has attribute %s=%s, naming caller %s", name, kv.Key, kv.Value.Emit(), u)
					}
				}
			}
		}
	}
}

const (
	policy = "aspnetcore.rate_limiting.policy"
	result = "aspnetcore.rate_limiting.result"
)

// Through a real middleware, three orders from alice under a rule of two
// count two acquired and one endpoint_limiter, under ASP.NET Core's names,
// with the rule as the policy and no attribute naming alice or bob.
func TestRequestsCountedUnderASPNETCoreNames(t *testing.T) {
	s := newSite(t, siteOpts{})
	for i, want := range []int{200, 200, 429} {
		if got := s.do(t, "POST", "/api/orders", "alice"); got != want {
			t.Fatalf("order %d: status %d, want %d", i+1, got, want)
		}
	}
	if got := s.do(t, "POST", "/api/orders", "bob"); got != 200 {
		t.Fatalf("bob's order: status %d, want 200", got)
	}
	if got := s.do(t, "GET", "/health", "alice"); got != 200 { // no rule: not counted
		t.Fatalf("health: status %d, want 200", got)
	}
	got := s.collect(t)
	for _, c := range []struct {
		metric string
		kv     []string
		want   int64
	}{
		{sluiceotel.MetricRequests, []string{policy, "orders", result, "acquired"}, 3},
		{sluiceotel.MetricRequests, []string{policy, "orders", result, "endpoint_limiter"}, 1},
		{sluiceotel.MetricSpent, []string{policy, "orders"}, 3},
		{sluiceotel.MetricDecisionDuration, []string{policy, "orders"}, 4},
	} {
		if v, ok := value(got, c.metric, c.kv...); !ok || v != c.want {
			t.Errorf("%s%v = %d (found %v), want %d", c.metric, c.kv, v, ok, c.want)
		}
	}
	if n := len(got[sluiceotel.MetricRequests]); n != 2 {
		t.Errorf("%d data points of %s, want 2: %v", n, sluiceotel.MetricRequests, got[sluiceotel.MetricRequests])
	}
	checkNoCaller(t, got, "alice", "bob")
}

// eventsOf returns the decision events of the ended spans, in order, as
// maps of their attributes.
func (s *site) events(t *testing.T) []map[attribute.Key]attribute.Value {
	t.Helper()
	var out []map[attribute.Key]attribute.Value
	for _, sp := range s.spans.Ended() {
		n := 0
		for _, ev := range sp.Events() {
			if ev.Name != sluiceotel.EventDecision {
				continue
			}
			n++
			m := make(map[attribute.Key]attribute.Value)
			for _, kv := range ev.Attributes {
				m[kv.Key] = kv.Value
			}
			out = append(out, m)
		}
		if n != 1 {
			t.Errorf("span %q has %d decision events, want 1", sp.Name(), n)
		}
	}
	return out
}

// Each request's own span carries one decision event: the verdict, the
// rule, ASP.NET Core's result, the figures of the answer, and nothing that
// names the caller.
func TestSpanEventOnTheRequestSpan(t *testing.T) {
	s := newSite(t, siteOpts{})
	for range 3 {
		s.do(t, "POST", "/api/orders", "alice")
	}
	s.do(t, "GET", "/health", "alice")
	evs := s.events(t)
	if len(evs) != 4 {
		t.Fatalf("%d decision events, want 4", len(evs))
	}
	for i, want := range []map[attribute.Key]attribute.Value{
		{sluiceotel.AttrVerdict: attribute.StringValue("allowed"), sluiceotel.AttrPolicy: attribute.StringValue("orders"),
			sluiceotel.AttrResult: attribute.StringValue("acquired"), sluiceotel.AttrLimit: attribute.Int64Value(2),
			sluiceotel.AttrRemaining: attribute.Int64Value(1)},
		{sluiceotel.AttrVerdict: attribute.StringValue("allowed"), sluiceotel.AttrPolicy: attribute.StringValue("orders"),
			sluiceotel.AttrResult: attribute.StringValue("acquired"), sluiceotel.AttrLimit: attribute.Int64Value(2),
			sluiceotel.AttrRemaining: attribute.Int64Value(0)},
		{sluiceotel.AttrVerdict: attribute.StringValue("denied"), sluiceotel.AttrPolicy: attribute.StringValue("orders"),
			sluiceotel.AttrResult: attribute.StringValue("endpoint_limiter"), sluiceotel.AttrLimit: attribute.Int64Value(2),
			sluiceotel.AttrRemaining: attribute.Int64Value(0), sluiceotel.AttrRetryAfter: attribute.Float64Value(30)},
		{sluiceotel.AttrVerdict: attribute.StringValue("unlimited")},
	} {
		if len(evs[i]) != len(want) {
			t.Errorf("event %d: %v, want %v", i, evs[i], want)
			continue
		}
		for k, v := range want {
			if evs[i][k] != v {
				t.Errorf("event %d: %s = %s, want %s", i, k, evs[i][k].Emit(), v.Emit())
			}
		}
	}
	for i, ev := range evs {
		for k, v := range ev {
			if strings.Contains(v.Emit(), "alice") {
				t.Errorf("event %d: %s=%s names the caller", i, k, v.Emit())
			}
		}
	}
}

// A shadow rule's would-be denial counts in shadow_denials, not in
// requests (the request passed), and the span event says so.
func TestShadowDenials(t *testing.T) {
	s := newSite(t, siteOpts{})
	for range 2 {
		if got := s.do(t, "GET", "/api/search", "alice"); got != 200 {
			t.Fatalf("status %d, want 200: a shadow rule never refuses", got)
		}
	}
	got := s.collect(t)
	if v, _ := value(got, sluiceotel.MetricShadowDenials, policy, "search-trial"); v != 1 {
		t.Errorf("shadow denials %d, want 1", v)
	}
	if v, _ := value(got, sluiceotel.MetricRequests, policy, "search-trial", result, "acquired"); v != 1 {
		t.Errorf("acquired %d, want 1", v)
	}
	if _, ok := value(got, sluiceotel.MetricRequests, policy, "search-trial", result, "endpoint_limiter"); ok {
		t.Error("a would-be denial counted as a denied request")
	}
	evs := s.events(t)
	if len(evs) != 2 {
		t.Fatalf("%d decision events, want 2", len(evs))
	}
	for i, wantDenied := range []bool{false, true} {
		if ev := evs[i]; ev[sluiceotel.AttrShadowPolicy].AsString() != "search-trial" || ev[sluiceotel.AttrShadowDenied].AsBool() != wantDenied ||
			ev[sluiceotel.AttrVerdict].AsString() != "unlimited" {
			t.Errorf("event %d: %v, want verdict unlimited, shadow policy search-trial, shadow denied %v", i, ev, wantDenied)
		}
	}
	checkNoCaller(t, got, "alice")
}

// A store error counts in store_errors with the policy that applied; under
// FailLocal, the local decisions count in local_decisions and in requests.
func TestStoreErrors(t *testing.T) {
	for _, pol := range []sluice.StoreErrorPolicy{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		t.Run(string(pol), func(t *testing.T) {
			s := newSite(t, siteOpts{policy: pol})
			if _, err := s.faults.Add(faulty.Rule{Err: errors.New("disk on fire")}); err != nil {
				t.Fatal(err)
			}
			wantStatus, wantVerdict := map[sluice.StoreErrorPolicy]int{sluice.FailOpen: 200, sluice.FailClosed: 503, sluice.FailLocal: 200}[pol],
				map[sluice.StoreErrorPolicy]string{sluice.FailOpen: "passed", sluice.FailClosed: "unavailable", sluice.FailLocal: "allowed"}[pol]
			if got := s.do(t, "POST", "/api/orders", "alice"); got != wantStatus {
				t.Fatalf("status %d, want %d", got, wantStatus)
			}
			got := s.collect(t)
			if v, _ := value(got, sluiceotel.MetricStoreErrors, policy, "orders", "sluice.rate_limiting.on_store_error", string(pol)); v != 1 {
				t.Errorf("store errors %d, want 1: %v", v, got[sluiceotel.MetricStoreErrors])
			}
			wantLocal := int64(0)
			if pol == sluice.FailLocal {
				wantLocal = 1
			}
			if v, _ := value(got, sluiceotel.MetricLocalDecisions, policy, "orders", result, "acquired"); v != wantLocal {
				t.Errorf("local decisions %d, want %d", v, wantLocal)
			}
			if v, _ := value(got, sluiceotel.MetricRequests, policy, "orders", result, "acquired"); v != wantLocal {
				t.Errorf("acquired %d, want %d", v, wantLocal)
			}
			evs := s.events(t)
			if len(evs) != 1 || evs[0][sluiceotel.AttrVerdict].AsString() != wantVerdict {
				t.Errorf("events %v, want one with verdict %s", evs, wantVerdict)
			}
			checkNoCaller(t, got, "alice")
		})
	}
}

// With NoSpanEvents, the spans carry no event and the metrics still count.
func TestNoSpanEvents(t *testing.T) {
	s := newSite(t, siteOpts{obs: sluiceotel.Options{NoSpanEvents: true}})
	s.do(t, "POST", "/api/orders", "alice")
	for _, sp := range s.spans.Ended() {
		if n := len(sp.Events()); n != 0 {
			t.Errorf("span %q has %d events, want none", sp.Name(), n)
		}
	}
	if v, _ := value(s.collect(t), sluiceotel.MetricRequests, policy, "orders", result, "acquired"); v != 1 {
		t.Errorf("acquired %d, want 1", v)
	}
}

// Options.Next is told what the Observer is told: package metrics counts
// for Prometheus beside OpenTelemetry.
func TestNextObserver(t *testing.T) {
	prom := metrics.New(nil)
	s := newSite(t, siteOpts{obs: sluiceotel.Options{Next: prom}})
	for range 3 {
		s.do(t, "POST", "/api/orders", "alice")
	}
	for range 2 {
		s.do(t, "GET", "/api/search", "alice")
	}
	var orders, search metrics.RuleSnapshot
	for _, r := range prom.Snapshot().Rules {
		switch r.Name {
		case "orders":
			orders = r
		case "search-trial":
			search = r
		}
	}
	if orders.Allowed != 2 || orders.Denied != 1 || orders.Spent != 2 || search.ShadowDenied != 1 {
		t.Errorf("Prometheus counts: orders %+v, search-trial %+v; want 2 allowed, 1 denied, 2 spent, 1 would-be denial", orders, search)
	}
	if v, _ := value(s.collect(t), sluiceotel.MetricRequests, policy, "orders", result, "acquired"); v != 2 {
		t.Errorf("OpenTelemetry acquired %d, want 2", v)
	}
}
