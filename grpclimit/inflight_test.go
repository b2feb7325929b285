package grpclimit_test

import (
	"context"
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

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/grpclimit"
)

// TestInFlightCalls: with one slot, a unary call running holds it, and a
// second call ends at once with ResourceExhausted and the configured
// retry-after; a stream holds it for as long as it is open, and gives it
// back as soon as its client goes away.
func TestInFlightCalls(t *testing.T) {
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	f, err := grpclimit.NewInFlight(grpclimit.InFlightConfig{
		Engine:     eng,
		Limit:      engine.Limit{Namespace: "inflight", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: 1, Window: time.Minute})},
		Key:        func(context.Context, string) (string, error) { return "tenant", nil },
		RetryAfter: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	entered, leave, left := make(chan struct{}, 4), make(chan struct{}, 4), make(chan struct{}, 4)
	blocking := func(ctx context.Context) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("block")) == 0 {
			return
		}
		entered <- struct{}{}
		select {
		case <-leave:
		case <-ctx.Done():
		}
		left <- struct{}{}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(f.UnaryServerInterceptor(), func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			blocking(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(f.StreamServerInterceptor(), func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
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

	// A unary call holds the slot while it runs.
	done := make(chan error, 1)
	go func() {
		_, err := client.Check(block, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	<-entered
	var hdr metadata.MD
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	if status.Code(err) != codes.ResourceExhausted || len(hdr.Get("retry-after")) != 1 || hdr.Get("retry-after")[0] != "2" {
		t.Fatalf("second call: %v, retry-after %v; want ResourceExhausted, 2", err, hdr.Get("retry-after"))
	}
	leave <- struct{}{}
	<-left
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("after the first call ended: %v", err)
	}

	// A stream holds it while open; its client going away frees it.
	sctx, cancel := context.WithCancel(block)
	stream, err := client.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call while a stream is open: %v", err)
	}
	cancel()
	stream.Recv()
	<-left
	for {
		// The release follows the stream's handler returning: retry
		// until it has landed.
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatal(err)
		}
	}
	if f.Held() != 0 {
		t.Fatalf("Held() = %d", f.Held())
	}
}
