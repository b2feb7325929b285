package grpclimit

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/metrics"
)

// benchStream is the grpc.ServerTransportStream of a server call, so that
// grpc.SetHeader works outside a server.
type benchStream struct{ hdr metadata.MD }

func (s *benchStream) Method() string                  { return checkMethod }
func (s *benchStream) SetHeader(md metadata.MD) error  { s.hdr = md; return nil }
func (s *benchStream) SendHeader(md metadata.MD) error { s.hdr = md; return nil }
func (s *benchStream) SetTrailer(metadata.MD) error    { return nil }

// BenchmarkUnary is one unary call through the interceptor, called
// directly with a no-op handler and the context a server call carries
// (request metadata, the peer, the transport stream) built once: the
// interceptor's own cost, per rule shape and answer.
func BenchmarkUnary(b *testing.B) {
	const open, shut = 1_000_000_000, 1
	rule := func(name, prefix string, limit int64, window time.Duration) sluice.Rule {
		return sluice.Rule{Name: name, PathPrefix: prefix, Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: limit, Window: window}
	}
	shadow := func(r sluice.Rule) sluice.Rule { r.Shadow = true; return r }
	host := func(r sluice.Rule) sluice.Rule { r.Host = "api.example.com"; return r }
	for _, bc := range []struct {
		name        string
		mode        sluice.MatchMode
		rules       []sluice.Rule
		denialsOnly bool
		want        codes.Code
	}{
		{"allowed", "", []sluice.Rule{rule("a", checkMethod, open, time.Millisecond)}, false, codes.OK},
		{"denied", "", []sluice.Rule{rule("a", checkMethod, shut, time.Hour)}, false, codes.ResourceExhausted},
		{"denialsonly/allowed", "", []sluice.Rule{rule("a", checkMethod, open, time.Millisecond)}, true, codes.OK},
		{"all/allowed", sluice.MatchAll, []sluice.Rule{rule("a", checkMethod, open, time.Millisecond), rule("b", "/", open, time.Millisecond)}, false, codes.OK},
		{"all/denied", sluice.MatchAll, []sluice.Rule{rule("a", checkMethod, open, time.Millisecond), rule("b", "/", shut, time.Hour)}, false, codes.ResourceExhausted},
		{"shadow/allowed", "", []sluice.Rule{rule("a", checkMethod, open, time.Millisecond), shadow(rule("b", checkMethod, open, time.Millisecond))}, false, codes.OK},
		{"shadow/denied", "", []sluice.Rule{rule("a", checkMethod, open, time.Millisecond), shadow(rule("b", checkMethod, shut, time.Hour))}, false, codes.OK},
		{"host/allowed", "", []sluice.Rule{host(rule("a", checkMethod, open, time.Millisecond)), rule("b", "/", shut, time.Hour)}, false, codes.OK},
	} {
		b.Run(bc.name, func(b *testing.B) {
			eng, err := engine.New(memory.New(nil), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			rs, err := sluice.NewRuleset(bc.rules, nil, bc.mode)
			if err != nil {
				b.Fatal(err)
			}
			lim, err := New(Config{Engine: eng, Registry: sluice.NewRegistry(rs), Metrics: metrics.New(nil), DenialMetadataOnly: bc.denialsOnly})
			if err != nil {
				b.Fatal(err)
			}
			icpt := lim.UnaryServerInterceptor()
			info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user-id", "bench", ":authority", "api.example.com:443", "content-type", "application/grpc"))
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}})
			ctx = grpc.NewContextWithServerTransportStream(ctx, &benchStream{})
			handler := func(context.Context, any) (any, error) { return nil, nil }
			icpt(ctx, nil, info, handler)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := icpt(ctx, nil, info, handler); status.Code(err) != bc.want {
					b.Fatalf("%v, want %v", err, bc.want)
				}
			}
		})
	}
}
