package grpclimit

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/metrics"
)

// A call whose context ended before it was decided, over a store that
// reads the context (a compare-and-swap store), ends with the context's
// own status (Canceled, DeadlineExceeded) under every policy, not
// Unavailable, and is neither counted as a store error nor logged; the
// handler is not called.
func TestContextEndedCall(t *testing.T) {
	rs, err := sluice.NewRuleset([]sluice.Rule{checkRule}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, stop := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer stop()
	for _, policy := range []sluice.StoreErrorPolicy{sluice.FailOpen, sluice.FailClosed} {
		for _, c := range []struct {
			ctx  context.Context
			want codes.Code
		}{{cancelled, codes.Canceled}, {expired, codes.DeadlineExceeded}} {
			clock := engine.NewFakeClock(t0)
			eng, err := engine.New(backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now}),
				&engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { eng.Close() })
			m, logs := metrics.New(nil), &syncBuffer{}
			lim, err := New(Config{Engine: eng, Registry: sluice.NewRegistry(rs), Metrics: m, OnStoreError: policy,
				Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx := metadata.NewIncomingContext(c.ctx, metadata.Pairs("x-user-id", "alice"))
			ctx = grpc.NewContextWithServerTransportStream(ctx, &benchStream{})
			called := false
			_, err = lim.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: checkMethod},
				func(context.Context, any) (any, error) { called = true; return nil, nil })
			if got := status.Code(err); got != c.want || called {
				t.Errorf("%s, %v: %v (handler called %v); want %v, the handler not called", policy, c.want, err, called, c.want)
			}
			if snap := m.Snapshot(); snap.StoreErrors() != 0 {
				t.Errorf("%s, %v: %d store errors counted, want 0", policy, c.want, snap.StoreErrors())
			}
			if logs.String() != "" {
				t.Errorf("%s, %v: logged %q, want nothing", policy, c.want, logs.String())
			}
		}
	}
}
