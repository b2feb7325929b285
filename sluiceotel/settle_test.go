package sluiceotel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/sluiceotel"
)

// TestObserveSettle counts settles by result and the units by kind, and
// passes them on to the next observer.
func TestObserveSettle(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	prom := metrics.New(nil)
	o, err := sluiceotel.New(&sluiceotel.Options{MeterProvider: mp, Next: prom})
	if err != nil {
		t.Fatal(err)
	}
	o.ObserveSettle("tokens", 0, 30, false)
	o.ObserveSettle("tokens", 12, 0, false)
	o.ObserveSettle("tokens", 0, 0, true)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range d.DataPoints {
					k := m.Name
					for _, kv := range dp.Attributes.ToSlice() {
						k += " " + string(kv.Key) + "=" + kv.Value.Emit()
					}
					got[k] = dp.Value
				}
			}
		}
	}
	p := " aspnetcore.rate_limiting.policy=tokens"
	for k, want := range map[string]int64{
		sluiceotel.MetricSettles + p + " sluice.rate_limiting.settle_result=settled":     2,
		sluiceotel.MetricSettles + p + " sluice.rate_limiting.settle_result=unsettled":   1,
		sluiceotel.MetricSettledUnits + p + " sluice.rate_limiting.settle_kind=charged":  12,
		sluiceotel.MetricSettledUnits + p + " sluice.rate_limiting.settle_kind=refunded": 30,
	} {
		if got[k] != want {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], want, got)
		}
	}
	s, _ := prom.Snapshot().Rule("tokens")
	if s.Settled != 2 || s.Unsettled != 1 || s.Charged != 12 || s.Refunded != 30 {
		t.Errorf("next observer: %+v", s)
	}
}
