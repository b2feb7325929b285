package grpclimit_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/identity"
)

// Three health checks a minute per user, on a real server on loopback.
// The client reads the rate-limit fields from the response header metadata
// and, on a denial, the exact wait from the status's RetryInfo. (The fake
// clock keeps the output fixed; a real program leaves Options.Clock nil.)
func ExampleNew() {
	eng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_040, 0))})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{
		// The full method name is the path: this prefix covers the service.
		Name: "health", PathPrefix: "/grpc.health.v1.Health/",
		Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 3, Window: time.Minute,
	}}, nil, sluice.MatchMostSpecific)
	if err != nil {
		panic(err)
	}
	lim, err := grpclimit.New(grpclimit.Config{
		Engine:       eng,
		Registry:     sluice.NewRegistry(rs),
		OnStoreError: sluice.FailOpen,
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	// The default identity: the user id in the x-user-id metadata.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user-id", "alice")
	for i := 1; i <= 4; i++ {
		var hdr metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		fmt.Printf("%d: %s ratelimit: %s", i, status.Code(err), hdr.Get("ratelimit")[0])
		if err != nil {
			for _, d := range status.Convert(err).Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					fmt.Printf(" retry-after: %s retry delay: %v", hdr.Get("retry-after")[0], ri.GetRetryDelay().AsDuration())
				}
			}
		}
		fmt.Println()
	}
	// Output:
	// 1: OK ratelimit: "health";r=2;t=20
	// 2: OK ratelimit: "health";r=1;t=40
	// 3: OK ratelimit: "health";r=0;t=60
	// 4: ResourceExhausted ratelimit: "health";r=0;t=20 retry-after: 20 retry delay: 20s
}

// An IdentityFunc fed by verified credentials: the subject of the client
// certificate the server's mutual TLS verified, so that a caller cannot
// claim another's budget by sending x-user-id. A call without one is
// refused as Unauthenticated.
func ExampleIdentityFunc() {
	var fromClientCert grpclimit.IdentityFunc = func(ctx context.Context, _ string) (identity.Caller, error) {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return identity.Caller{}, errors.New("no peer")
		}
		tlsInfo, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(tlsInfo.State.VerifiedChains) == 0 {
			return identity.Caller{}, status.Error(codes.Unauthenticated, "a client certificate is required")
		}
		var leaf *x509.Certificate = tlsInfo.State.VerifiedChains[0][0]
		return identity.Caller{UserID: leaf.Subject.CommonName}, nil
	}
	cfg := grpclimit.Config{Identity: fromClientCert}
	fmt.Println(cfg.Identity != nil)
	// Output: true
}
