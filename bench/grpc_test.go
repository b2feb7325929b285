package bench

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
)

// The gRPC interceptors compared, each a grpc.UnaryServerInterceptor:
//
//   - sluice-global, sluice-user: grpclimit's interceptor over the memory
//     engine, one token-bucket rule on the method, scoped global
//     (respectively per user, the id read from the x-user-id metadata);
//     every decision also builds the response's rate-limit metadata.
//   - sluice-global-denialsonly: sluice-global with
//     Config.DenialMetadataOnly: an allowed call builds no metadata.
//   - sluice-user-via-ratelimit: the same per-user Limiter behind
//     go-grpc-middleware's ratelimit.UnaryServerInterceptor (Limit).
//   - ratelimit-xtimerate-global: go-grpc-middleware v2's ratelimit
//     interceptor with one golang.org/x/time/rate limiter, its README's
//     setup.
//   - ratelimit-xtimerate-user: the same with a rate.Limiter per user in a
//     sync.Map, keyed by the x-user-id metadata.
//   - floor: no interceptor, the handler alone.
var grpcInterceptors = []string{
	"floor",
	"ratelimit-xtimerate-global", "sluice-global", "sluice-global-denialsonly",
	"ratelimit-xtimerate-user", "sluice-user", "sluice-user-via-ratelimit",
}

// grpcMethod is the method every call names.
const grpcMethod = "/grpc.health.v1.Health/Check"

// xrateLimiter is a ratelimit.Limiter over one x/time/rate limiter.
type xrateLimiter struct{ l *rate.Limiter }

func (x xrateLimiter) Limit(context.Context) error {
	if !x.l.Allow() {
		return errRateLimited
	}
	return nil
}

var errRateLimited = errors.New("rate limited")

// xratePerUser is a ratelimit.Limiter with an x/time/rate limiter per
// x-user-id, as a per-caller limit is built on that package.
type xratePerUser struct {
	users sync.Map // user id → *rate.Limiter
	every rate.Limit
	burst int
}

func (x *xratePerUser) Limit(ctx context.Context) error {
	user := "anonymous"
	if v := metadata.ValueFromIncomingContext(ctx, "x-user-id"); len(v) == 1 {
		user = v[0]
	}
	l, ok := x.users.Load(user)
	if !ok {
		l, _ = x.users.LoadOrStore(user, rate.NewLimiter(x.every, x.burst))
	}
	if !l.(*rate.Limiter).Allow() {
		return errRateLimited
	}
	return nil
}

// grpcRule is the one rule of the Sluice cases: a limit no benchmark can
// spend, or one an hour for the denial tests.
func grpcRule(scope sluice.Scope, limit int64, window time.Duration) sluice.Rule {
	return sluice.Rule{Name: "check", PathPrefix: grpcMethod, Scope: scope, Algorithm: "token_bucket", Limit: limit, Window: window}
}

// newGRPCInterceptor returns the named interceptor, allowing every call
// (limit 1e9 a second is a budget no run spends) or, with limit 1 an hour, one call.
func newGRPCInterceptor(tb testing.TB, impl string, limit int64, window time.Duration) grpc.UnaryServerInterceptor {
	tb.Helper()
	perSecond := rate.Limit(float64(limit) / window.Seconds())
	sluiceLimiter := func(scope sluice.Scope, denialsOnly bool) *grpclimit.Limiter {
		eng, err := engine.New(memory.New(nil), nil)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { eng.Close() })
		rs, err := sluice.NewRuleset([]sluice.Rule{grpcRule(scope, limit, window)}, nil, "")
		if err != nil {
			tb.Fatal(err)
		}
		lim, err := grpclimit.New(grpclimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), DenialMetadataOnly: denialsOnly})
		if err != nil {
			tb.Fatal(err)
		}
		return lim
	}
	switch impl {
	case "floor":
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return handler(ctx, req)
		}
	case "ratelimit-xtimerate-global":
		return ratelimit.UnaryServerInterceptor(xrateLimiter{rate.NewLimiter(perSecond, int(limit))})
	case "ratelimit-xtimerate-user":
		return ratelimit.UnaryServerInterceptor(&xratePerUser{every: perSecond, burst: int(limit)})
	case "sluice-global":
		return sluiceLimiter(sluice.ScopeGlobal, false).UnaryServerInterceptor()
	case "sluice-global-denialsonly":
		return sluiceLimiter(sluice.ScopeGlobal, true).UnaryServerInterceptor()
	case "sluice-user":
		return sluiceLimiter(sluice.ScopeUser, false).UnaryServerInterceptor()
	case "sluice-user-via-ratelimit":
		return ratelimit.UnaryServerInterceptor(sluiceLimiter(sluice.ScopeUser, false))
	}
	tb.Fatalf("unknown interceptor %q", impl)
	return nil
}

// benchStream is the grpc.ServerTransportStream a server call's context
// carries, so that grpc.SetHeader works outside a server. It keeps the
// last metadata set, without the merge a real stream does.
type benchStream struct{ hdr metadata.MD }

func (s *benchStream) Method() string                  { return grpcMethod }
func (s *benchStream) SetHeader(md metadata.MD) error  { s.hdr = md; return nil }
func (s *benchStream) SendHeader(md metadata.MD) error { s.hdr = md; return nil }
func (s *benchStream) SetTrailer(metadata.MD) error    { return nil }

// serverContext returns the context of a server call from 192.0.2.1 with
// the request metadata x-user-id: user, as the server's transport builds
// it, and its stream.
func serverContext(user string) (context.Context, *benchStream) {
	st := &benchStream{}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user-id", user, "content-type", "application/grpc", "user-agent", "grpc-go/1.85.0"))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, st)
	return ctx, st
}

// okHandler is the no-op service method.
func okHandler(context.Context, any) (any, error) { return nil, nil }

// BenchmarkGRPCInterceptor measures one unary call through each
// interceptor called directly, with a no-op handler: the context a server
// call carries (incoming metadata, the peer, the transport stream) is
// built once, so the figure is the interceptor's own cost. Every call is
// allowed. floor is the handler alone.
func BenchmarkGRPCInterceptor(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: grpcMethod}
	for _, impl := range grpcInterceptors {
		b.Run(impl, func(b *testing.B) {
			icpt := newGRPCInterceptor(b, impl, 1_000_000_000, time.Second)
			ctx, _ := serverContext("alice")
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := icpt(ctx, nil, info, okHandler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGRPCInterceptorDenied is BenchmarkGRPCInterceptor with every
// call denied: one call an hour, spent before the timer starts.
func BenchmarkGRPCInterceptorDenied(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: grpcMethod}
	for _, impl := range grpcInterceptors[1:] {
		b.Run(impl, func(b *testing.B) {
			icpt := newGRPCInterceptor(b, impl, 1, time.Hour)
			ctx, _ := serverContext("alice")
			if _, err := icpt(ctx, nil, info, okHandler); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := icpt(ctx, nil, info, okHandler); status.Code(err) != codes.ResourceExhausted {
					b.Fatal(err)
				}
			}
		})
	}
}

// loopbackHealth serves the health service behind icpt on loopback and
// returns a client of it.
func loopbackHealth(tb testing.TB, icpt grpc.UnaryServerInterceptor) healthpb.HealthClient {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(icpt))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// BenchmarkGRPCLoopback is one Check call of the health service over
// loopback, client and server in this process, through each interceptor;
// floor is the call without one. It is dominated by the transport: the
// interceptor's share is its ns/op minus floor's.
func BenchmarkGRPCLoopback(b *testing.B) {
	for _, impl := range grpcInterceptors {
		b.Run(impl, func(b *testing.B) {
			client := loopbackHealth(b, newGRPCInterceptor(b, impl, 1_000_000_000, time.Second))
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user-id", "alice")
			req := &healthpb.HealthCheckRequest{}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := client.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Every interceptor compared admits exactly its limit and then refuses
// with ResourceExhausted, over loopback; the Sluice ones also send the
// retry-after metadata, through go-grpc-middleware's interceptor too,
// whose status carries the text of Limit's error.
func TestGRPCInterceptorsAgree(t *testing.T) {
	for _, impl := range grpcInterceptors[1:] {
		t.Run(impl, func(t *testing.T) {
			client := loopbackHealth(t, newGRPCInterceptor(t, impl, 3, time.Hour))
			ctx := metadata.AppendToOutgoingContext(t.Context(), "x-user-id", "alice")
			for i := range 3 {
				if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
			}
			var hdr metadata.MD
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("call 4: %v, want ResourceExhausted", err)
			}
			if !strings.HasPrefix(impl, "sluice") {
				return
			}
			// 3 an hour: one token every 20 minutes.
			if got := hdr.Get("retry-after"); len(got) != 1 || got[0] != "1200" {
				t.Errorf("retry-after = %q, want [1200]", got)
			}
			if got := hdr.Get("ratelimit"); len(got) != 1 || got[0] != `"check";r=0;t=3600` {
				t.Errorf("ratelimit = %q", got)
			}
			if impl == "sluice-user-via-ratelimit" && !strings.Contains(status.Convert(err).Message(), "rate limit exceeded for rule check") {
				t.Errorf("through ratelimit.UnaryServerInterceptor: %q, want the Limiter's error quoted", status.Convert(err).Message())
			}
			if impl == "sluice-user" || impl == "sluice-user-via-ratelimit" {
				other := metadata.AppendToOutgoingContext(t.Context(), "x-user-id", "bob")
				if _, err := client.Check(other, &healthpb.HealthCheckRequest{}); err != nil {
					t.Errorf("another user: %v, want allowed", err)
				}
			}
		})
	}
}

// The adapter works behind go-grpc-middleware's stream interceptor too:
// a stream is decided when it opens.
func TestGRPCRateLimitStreamAdapter(t *testing.T) {
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "watch", PathPrefix: "/grpc.health.v1.Health/Watch", Scope: sluice.ScopeGlobal, Algorithm: "fixed_window", Limit: 1, Window: time.Hour}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	lim, err := grpclimit.New(grpclimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(lim)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	second, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
	if hdr, _ := second.Header(); len(hdr.Get("retry-after")) != 1 {
		t.Errorf("second stream's header %v, want retry-after", hdr)
	}
}
