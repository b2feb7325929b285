package grpclimit_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/metrics"
)

// TestRulesSlotsForCallsAndStreams: through the rules interceptors, a
// concurrency rule of one slot is held by a unary call while it runs, and
// by a stream for as long as it is open; a call finding it taken ends at
// once with ResourceExhausted and the rule's retry-after, and the slot is
// back as soon as the holder's handler has returned (its client gone, for
// the stream).
func TestRulesSlotsForCallsAndStreams(t *testing.T) {
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "health-slots", PathPrefix: "/grpc.health.v1.Health/", Scope: sluice.ScopeIP,
		Algorithm: algo.ConcurrencyName, Limit: 1, MaxHold: time.Minute, RetryAfter: 2 * time.Second}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(nil)
	l, err := grpclimit.New(grpclimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	entered, leave, ended := make(chan struct{}, 4), make(chan struct{}, 4), make(chan struct{}, 4)
	blocking := func(ctx context.Context) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("block")) == 0 {
			return
		}
		entered <- struct{}{}
		select {
		case <-leave:
		case <-ctx.Done():
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			defer func() { ended <- struct{}{} }() // after the limiter has given the slot back
			return h(ctx, req)
		}, l.UnaryServerInterceptor(), func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			blocking(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			defer func() { ended <- struct{}{} }()
			return h(srv, ss)
		}, l.StreamServerInterceptor(), func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			blocking(ss.Context())
			return ss.Context().Err()
		}),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	block := metadata.AppendToOutgoingContext(ctx, "block", "1")
	refused := func(what string) {
		t.Helper()
		var hdr metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		<-ended
		if status.Code(err) != codes.ResourceExhausted || len(hdr.Get("retry-after")) != 1 || hdr.Get("retry-after")[0] != "2" {
			t.Fatalf("%s: %v, retry-after %v; want ResourceExhausted, 2", what, err, hdr.Get("retry-after"))
		}
	}
	admitted := func(what string) {
		t.Helper()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		<-ended
		if err != nil {
			t.Fatalf("%s: %v, want admitted", what, err)
		}
	}

	done := make(chan error, 1)
	go func() {
		_, err := client.Check(block, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	<-entered
	refused("a call while a unary call runs")
	leave <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-ended
	admitted("after the unary call")

	sctx, cancel := context.WithCancel(block)
	stream, err := client.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	refused("a call while a stream is open")
	if s, _ := m.Snapshot().Rule("health-slots"); s.SlotsInUse != 1 {
		t.Errorf("slots in use while the stream is open: %d, want 1", s.SlotsInUse)
	}
	cancel()
	stream.Recv()
	<-ended
	admitted("after the stream's client went away")
	if s, _ := m.Snapshot().Rule("health-slots"); s.SlotsInUse != 0 || s.Denied != 2 {
		t.Errorf("at the end: %d slots in use, %d denied; want 0, 2", s.SlotsInUse, s.Denied)
	}
}
