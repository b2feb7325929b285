package sluiceotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/sluiceotel"
)

// Once a rule has been seen, the Observe methods allocate nothing of their
// own: measured over a MeterProvider that records nothing.
func TestObserveAllocatesNothing(t *testing.T) {
	obs, err := sluiceotel.New(&sluiceotel.Options{MeterProvider: noop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	obs.ObserveDecisionCost("orders", true, 1, time.Microsecond) // first sight makes the rule's attributes
	if n := testing.AllocsPerRun(100, func() {
		obs.ObserveDecisionCost("orders", true, 2, time.Microsecond)
		obs.ObserveDecisionCost("orders", false, 2, time.Microsecond)
		obs.ObserveStoreError("orders", sluice.FailLocal)
		obs.ObserveLocalDecision("orders", true)
		obs.ObserveShadowDenial("orders", 1, time.Microsecond)
		obs.ObserveOutcome(context.Background(), sluice.Outcome{Verdict: sluice.Allowed}) // no span
	}); n != 0 {
		t.Errorf("%v allocations per run, want 0", n)
	}
}

// BenchmarkObserveDecision is one decision told to an Observer over the
// SDK's MeterProvider: what a door pays for OpenTelemetry metrics.
func BenchmarkObserveDecision(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	obs, err := sluiceotel.New(&sluiceotel.Options{MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			obs.ObserveDecisionCost("orders", true, 1, time.Microsecond)
		}
	})
}
