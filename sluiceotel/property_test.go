package sluiceotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/sluiceotel"
)

// For any sequence of observations, the OpenTelemetry counts equal package
// metrics' Prometheus counts, rule by rule: the two exporters tell an
// operator the same thing. (The Prometheus Metrics is the Observer's Next,
// so both are told exactly the same calls.)
func TestCountsEqualPrometheus(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		prom := metrics.New(nil)
		obs, err := sluiceotel.New(&sluiceotel.Options{MeterProvider: mp, Next: prom})
		if err != nil {
			rt.Fatal(err)
		}
		rules := []string{"orders", "search", "catch-all"}
		policies := []sluice.StoreErrorPolicy{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal}
		n := rapid.IntRange(0, 60).Draw(rt, "n")
		for range n {
			rule := rapid.SampledFrom(rules).Draw(rt, "rule")
			allowed := rapid.Bool().Draw(rt, "allowed")
			cost := rapid.Int64Range(-1, 5).Draw(rt, "cost")
			switch rapid.IntRange(0, 3).Draw(rt, "kind") {
			case 0:
				obs.ObserveDecisionCost(rule, allowed, cost, time.Microsecond)
			case 1:
				obs.ObserveStoreError(rule, rapid.SampledFrom(policies).Draw(rt, "policy"))
			case 2:
				obs.ObserveDecisionCost(rule, allowed, cost, time.Microsecond)
				obs.ObserveLocalDecision(rule, allowed)
			case 3:
				obs.ObserveShadowDenial(rule, cost, time.Microsecond)
			}
		}

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			rt.Fatal(err)
		}
		// otel[metric][rule, second attribute's value] = sum
		otel := make(map[string]map[[2]string]int64)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok {
					continue
				}
				otel[m.Name] = make(map[[2]string]int64)
				for _, dp := range sum.DataPoints {
					p, _ := dp.Attributes.Value(sluiceotel.AttrPolicy)
					var second string
					if v, ok := dp.Attributes.Value(sluiceotel.AttrResult); ok {
						second = v.AsString()
					} else if v, ok := dp.Attributes.Value(sluiceotel.AttrOnStoreError); ok {
						second = v.AsString()
					}
					otel[m.Name][[2]string{p.AsString(), second}] += dp.Value
				}
			}
		}
		snap := prom.Snapshot()
		for _, rule := range rules {
			r, _ := snap.Rule(rule)
			for _, c := range []struct {
				metric, second string
				want           uint64
			}{
				{sluiceotel.MetricRequests, sluiceotel.ResultAcquired, r.Allowed},
				{sluiceotel.MetricRequests, sluiceotel.ResultEndpointLimiter, r.Denied},
				{sluiceotel.MetricSpent, "", r.Spent},
				{sluiceotel.MetricStoreErrors, "open", r.StoreErrorsOpen},
				{sluiceotel.MetricStoreErrors, "closed", r.StoreErrorsClosed},
				{sluiceotel.MetricStoreErrors, "local", r.StoreErrorsLocal},
				{sluiceotel.MetricLocalDecisions, sluiceotel.ResultAcquired, r.LocalAllowed},
				{sluiceotel.MetricLocalDecisions, sluiceotel.ResultEndpointLimiter, r.LocalDenied},
				{sluiceotel.MetricShadowDenials, "", r.ShadowDenied},
			} {
				if got := otel[c.metric][[2]string{rule, c.second}]; got != int64(c.want) {
					rt.Fatalf("%s{%s, %s} = %d, Prometheus counts %d", c.metric, rule, c.second, got, c.want)
				}
			}
		}
	})
}
