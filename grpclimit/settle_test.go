package grpclimit

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/metrics"
)

// fakeStream is a server stream of a context, keeping its trailer.
type fakeStream struct {
	grpc.ServerStream
	ctx     context.Context
	trailer metadata.MD
}

func (f *fakeStream) Context() context.Context     { return f.ctx }
func (f *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (f *fakeStream) SetTrailer(md metadata.MD)    { f.trailer = metadata.Join(f.trailer, md) }
func (f *fakeStream) SendHeader(metadata.MD) error { return nil }

// TestSettleFromTrailer settles unary calls and streams with the actual
// cost of their trailer: a refund, a charge, a failed call (nothing), a
// call without the trailer and a call whose client went away (the
// estimate stands).
func TestSettleFromTrailer(t *testing.T) {
	eng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(t0), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	rule := sluice.Rule{Name: "tokens", PathPrefix: "/llm.", Scope: sluice.ScopeUser, Algorithm: "sliding_counter",
		Limit: 1000, Window: time.Minute, Cost: 50, Settle: &sluice.Settle{ActualTrailer: "X-Tokens"}}
	rs, err := sluice.NewRuleset([]sluice.Rule{rule}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(nil)
	l, err := New(Config{Engine: eng, Registry: sluice.NewRegistry(rs), Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	unary, stream := l.UnaryServerInterceptor(), l.StreamServerInterceptor()
	ctxOf := func(user string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user-id", user))
	}
	spent := func(user string) int64 {
		t.Helper()
		c := rs.Rules()[0]
		d, err := eng.Peek(context.Background(), c.Limit(), "user:"+user, 1)
		if err != nil {
			t.Fatal(err)
		}
		return 1000 - d.Remaining - 1 // Peek tells what a request of 1 would leave
	}
	callUnary := func(ctx context.Context, trailer string, fail error) {
		t.Helper()
		info := &grpc.UnaryServerInfo{FullMethod: "/llm.Model/Complete"}
		_, err := unary(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
			if trailer != "" {
				if err := grpc.SetTrailer(ctx, metadata.Pairs("x-tokens", trailer)); err != nil {
					t.Errorf("SetTrailer: %v", err)
				}
			}
			return nil, fail
		})
		if !errors.Is(err, fail) {
			t.Fatalf("unary: %v, want %v", err, fail)
		}
	}
	callStream := func(ctx context.Context, trailer string) *fakeStream {
		t.Helper()
		ss := &fakeStream{ctx: ctx}
		info := &grpc.StreamServerInfo{FullMethod: "/llm.Model/Stream"}
		if err := stream(nil, ss, info, func(_ any, s grpc.ServerStream) error {
			if trailer != "" {
				s.SetTrailer(metadata.Pairs("x-tokens", trailer))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return ss
	}

	callUnary(ctxOf("ann"), "7", nil)
	if got := spent("ann"); got != 7 {
		t.Fatalf("unary refund: spent %d, want 7", got)
	}
	callUnary(ctxOf("bob"), "120", nil)
	if got := spent("bob"); got != 120 {
		t.Fatalf("unary charge: spent %d, want 120", got)
	}
	callUnary(ctxOf("cat"), "", errors.New("upstream failed"))
	if got := spent("cat"); got != 0 {
		t.Fatalf("failed call: spent %d, want 0", got)
	}
	callUnary(ctxOf("dan"), "", nil)
	if got := spent("dan"); got != 50 {
		t.Fatalf("no trailer: spent %d, want the estimate, 50", got)
	}
	ss := callStream(ctxOf("eve"), "33")
	if got := spent("eve"); got != 33 {
		t.Fatalf("stream: spent %d, want 33", got)
	}
	if got := ss.trailer.Get("x-tokens"); len(got) != 1 || got[0] != "33" {
		t.Fatalf("the client's trailer: %q, want the handler's", got)
	}
	ctx, cancel := context.WithCancel(ctxOf("fay"))
	cancel()
	callStream(ctx, "1")
	if got := spent("fay"); got != 50 {
		t.Fatalf("client gone: spent %d, want the estimate, 50", got)
	}
	s, _ := m.Snapshot().Rule("tokens")
	if s.Settled != 4 || s.Unsettled != 2 || s.Charged != 70 || s.Refunded != 43+50+17 {
		t.Fatalf("metrics: %+v", s)
	}
}
