package grpclimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/grpclimit"
)

// TestDecisionFrom: with DecisionInContext, a unary call's handler and a
// stream's find the decision they were admitted with (the rule, what is
// left); without it, and for a call no rule covers, DecisionFrom finds
// none.
func TestDecisionFrom(t *testing.T) {
	for _, inCtx := range []bool{true, false} {
		t.Run(map[bool]string{true: "in context", false: "not asked"}[inCtx], func(t *testing.T) {
			eng, err := engine.New(memory.New(nil), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "health", PathPrefix: "/grpc.health.v1.Health/Check", Scope: sluice.ScopeIP,
				Algorithm: algo.FixedWindowName, Limit: 5, Window: time.Hour}, {Name: "watch", PathPrefix: "/grpc.health.v1.Health/Watch", Scope: sluice.ScopeIP,
				Algorithm: algo.ConcurrencyName, Limit: 3, MaxHold: time.Minute}}, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			l, err := grpclimit.New(grpclimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), DecisionInContext: inCtx, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			seen := make(chan string, 4)
			report := func(ctx context.Context) {
				d, ok := grpclimit.DecisionFrom(ctx)
				if !ok {
					seen <- "none"
					return
				}
				seen <- fmt.Sprintf("%s allowed %v remaining %d", d.Rule.Name(), d.Allowed, d.Remaining)
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(
				grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor(), func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
					report(ctx)
					return h(ctx, req)
				}),
				grpc.ChainStreamInterceptor(l.StreamServerInterceptor(), func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
					report(ss.Context())
					return nil
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
			if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			want := "none"
			if inCtx {
				want = "health allowed true remaining 4"
			}
			if got := <-seen; got != want {
				t.Errorf("unary: %q, want %q", got, want)
			}
			stream, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			stream.Recv()
			if inCtx {
				want = "watch allowed true remaining 2"
			}
			if got := <-seen; got != want {
				t.Errorf("stream: %q, want %q", got, want)
			}
			if _, err := client.List(context.Background(), &healthpb.HealthListRequest{}); err != nil {
				t.Fatal(err)
			}
			if got := <-seen; got != "none" {
				t.Errorf("a call no rule covers: %q, want none", got)
			}
		})
	}
}
