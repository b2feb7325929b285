package sluiceotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/sluiceotel"
)

// Two orders a minute per user, counted through OpenTelemetry. A real
// program gives sluiceotel.New its MeterProvider (or none: the global one)
// and exports with the SDK's readers; here a ManualReader collects, and
// the fake clock keeps the output fixed.
func ExampleNew() {
	eng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_040, 0))})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{
		Name: "orders", Method: "POST", PathPrefix: "/api/orders",
		Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 2, Window: time.Minute,
	}}, nil, sluice.MatchMostSpecific)
	if err != nil {
		panic(err)
	}

	reader := sdkmetric.NewManualReader()
	obs, err := sluiceotel.New(&sluiceotel.Options{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	if err != nil {
		panic(err)
	}
	limit, err := httplimit.New(httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), Metrics: obs})
	if err != nil {
		panic(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("POST", "/api/orders", nil)
		r.Header.Set("X-User-ID", "alice")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != sluiceotel.MetricRequests {
			continue
		}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			policy, _ := dp.Attributes.Value(sluiceotel.AttrPolicy)
			result, _ := dp.Attributes.Value(sluiceotel.AttrResult)
			fmt.Printf("%s{policy=%s, result=%s} %d\n", m.Name, policy.AsString(), result.AsString(), dp.Value)
		}
	}
	// Unordered output:
	// aspnetcore.rate_limiting.requests{policy=orders, result=acquired} 2
	// aspnetcore.rate_limiting.requests{policy=orders, result=endpoint_limiter} 1
}
