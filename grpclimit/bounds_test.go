package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
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
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// A flood of distinct identity metadata values of any length, through a
// real gRPC server, stores no caller key over identity.MaxKeyLen bytes:
// user ids up to identity.MaxUserIDLen are kept, longer ones answered
// InvalidArgument and never stored, API keys kept as their fixed-size
// hash. The records are counted on the real Pebble store after the flush.
func TestIdentityFloodStoresBoundedKeys(t *testing.T) {
	dir := t.TempDir()
	store, err := pebble.Open(dir, &pebble.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(store, &engine.Options{Clock: engine.NewFakeClock(t0), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rules := []sluice.Rule{
		{Name: "u", PathPrefix: checkMethod, Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 5, Window: 24 * time.Hour},
		{Name: "k", PathPrefix: "/grpc.health.v1.Health/List", Scope: sluice.ScopeAPIKey, Algorithm: "token_bucket", Limit: 5, Window: 24 * time.Hour},
	}
	rs, err := sluice.NewRuleset(rules, nil, sluice.MatchMostSpecific)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(identity.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := New(Config{Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	value := func(i, n int) string {
		s := fmt.Sprintf("%d-", i)
		return (s + strings.Repeat("v", max(0, n-len(s))))[:max(n, len(s))]
	}
	const each = 100
	accepted := 0
	for i := range each {
		for _, c := range []struct {
			key  string
			n    int
			want codes.Code
		}{
			{"x-user-id", 3 + i*(identity.MaxUserIDLen-3)/each, codes.OK},
			{"x-user-id", identity.MaxUserIDLen + 1 + i*512, codes.InvalidArgument},
			{"x-api-key", 8 + i*(identity.MaxAPIKeyLen-8)/each, codes.OK},
			{"x-api-key", identity.MaxAPIKeyLen + 1 + i*512, codes.InvalidArgument},
		} {
			ctx := metadata.AppendToOutgoingContext(t.Context(), c.key, value(i, c.n))
			if c.key == "x-user-id" {
				_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
			} else {
				_, err = client.List(ctx, &healthpb.HealthListRequest{})
			}
			if got := status.Code(err); got != c.want {
				t.Fatalf("%s of %d bytes: %v, want %v", c.key, c.n, err, c.want)
			}
			if c.want == codes.OK {
				accepted++
			}
		}
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	store, err = pebble.Open(dir, &pebble.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	records, keyBytes := 0, 0
	if err := store.Range(nil, func(r backend.Record) bool {
		ns, key, _ := engine.SplitKey(r.Key)
		records++
		keyBytes += len(r.Key)
		if len(key) > identity.MaxKeyLen || ns == "k" && len(key) != 36 {
			t.Errorf("rule %s stores a caller key of %d bytes", ns, len(key))
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if records != accepted {
		t.Errorf("%d records stored, want %d: one per accepted caller, none for a refused one", records, accepted)
	}
	t.Logf("%d records, %d bytes of stored keys", records, keyBytes)
}

// A log line about a call quotes at most a few hundred bytes of an
// IdentityFunc error that quotes the call's metadata.
func TestLogLinesAreBounded(t *testing.T) {
	rule := sluice.Rule{Name: "u", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	s := newServer(t, []sluice.Rule{rule}, serverOpts{config: func(c *Config) {
		c.Identity = func(ctx context.Context, method string) (identity.Caller, error) {
			return identity.Caller{}, errors.New("no session for token " + strings.Join(metadata.ValueFromIncomingContext(ctx, "token"), ""))
		}
	}})
	if _, err := s.check(t, "token", strings.Repeat("t", 300<<10)); status.Code(err) != codes.Internal {
		t.Fatalf("an IdentityFunc error: %v, want Internal", err)
	}
	logs := s.logs.String()
	if len(logs) > 2<<10 || !strings.Contains(logs, "cannot identify the caller") || !strings.Contains(logs, "bytes)") {
		t.Fatalf("%d bytes logged for a call with a 300 KiB token, want one line of at most 2 KiB, its cut marked: %.600s", len(logs), logs)
	}
}
