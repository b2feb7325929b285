package sluiceotel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/sluiceotel"
)

// TestObserveSlots counts a concurrency rule's slots held, up and down,
// and its expired leases, and passes them on to the next observer.
func TestObserveSlots(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	prom := metrics.New(nil)
	o, err := sluiceotel.New(&sluiceotel.Options{MeterProvider: mp, Next: prom})
	if err != nil {
		t.Fatal(err)
	}
	o.ObserveSlots("chat", 1)
	o.ObserveSlots("chat", 1)
	o.ObserveSlots("chat", -1)
	o.ObserveLeaseExpired("chat")
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range d.DataPoints {
					got[m.Name+" "+dp.Attributes.ToSlice()[0].Value.Emit()] = dp.Value
				}
			}
		}
	}
	for k, want := range map[string]int64{
		sluiceotel.MetricActiveLeases + " chat":  1,
		sluiceotel.MetricExpiredLeases + " chat": 1,
	} {
		if got[k] != want {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], want, got)
		}
	}
	s, _ := prom.Snapshot().Rule("chat")
	if s.SlotsInUse != 1 || s.LeasesExpired != 1 {
		t.Errorf("next observer: %+v", s)
	}
}
