package grpclimit

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/metrics"
)

// t0 is the start of every fixed timeline: a whole minute.
var t0 = time.Unix(1_700_000_040, 0)

// The methods of the health service, the registered service every test
// serves.
const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
	healthSvc   = "/grpc.health.v1.Health/"
)

// checkRule allows five Check calls a minute per user: one every 12s.
var checkRule = sluice.Rule{Name: "check", PathPrefix: checkMethod, Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 5, Window: time.Minute}

// server is a real gRPC server on loopback serving the health service
// behind a Limiter, over a memory engine with a fake clock (wrapped so a
// test can break the store), and a real client of it.
type server struct {
	clock   *engine.FakeClock
	eng     *engine.Engine
	faults  *faulty.Faults
	reg     *sluice.Registry
	metrics *metrics.Metrics
	health  *health.Server
	client  healthpb.HealthClient
	conn    *grpc.ClientConn // the client's connection
	logs    *syncBuffer
	waited  []time.Duration // the delays the Limiter waited
	mu      sync.Mutex      // guards waited
}

type serverOpts struct {
	mode   sluice.MatchMode
	def    *sluice.Rule
	idCfg  identity.Config
	config func(*Config)
}

func newServer(t *testing.T, rules []sluice.Rule, o serverOpts) *server {
	t.Helper()
	s := &server{clock: engine.NewFakeClock(t0), metrics: metrics.New(nil), logs: &syncBuffer{}, health: health.NewServer()}
	b, faults := faulty.Wrap(memory.New(&memory.Options{SweepInterval: -1}))
	s.faults = faults
	eng, err := engine.New(b, &engine.Options{Clock: s.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	s.eng = eng
	rs, err := sluice.NewRuleset(rules, o.def, o.mode)
	if err != nil {
		t.Fatal(err)
	}
	s.reg = sluice.NewRegistry(rs)
	id, err := identity.New(o.idCfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Engine: eng, Registry: s.reg, Identifier: id, Metrics: s.metrics,
		Logger: slog.New(slog.NewTextHandler(s.logs, nil)),
		wait: func(ctx context.Context, d time.Duration) bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.waited = append(s.waited, d)
			return ctx.Err() == nil
		},
	}
	if o.config != nil {
		o.config(&cfg)
	}
	lim, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, s.health)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.client, s.conn = healthpb.NewHealthClient(conn), conn
	return s
}

// check makes a Check call with the request metadata kv (key, value, …)
// and returns the response header metadata.
func (s *server) check(t *testing.T, kv ...string) (metadata.MD, error) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), kv...)
	var hdr metadata.MD
	_, err := s.client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	return hdr, err
}

// syncBuffer is a bytes.Buffer safe for a logger used by several calls.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// get returns md's one value of key, or "" (with a failure for several).
func get(t *testing.T, md metadata.MD, key string) string {
	t.Helper()
	vs := md.Get(key)
	if len(vs) > 1 {
		t.Fatalf("metadata %s given %d times: %q", key, len(vs), vs)
	}
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// retryInfo decodes the RetryInfo and QuotaFailure details of a status
// error as a client would.
func retryInfo(t *testing.T, err error) (time.Duration, *errdetails.QuotaFailure) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("%v is not a status error", err)
	}
	var retry time.Duration = -1
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch v := d.(type) {
		case *errdetails.RetryInfo:
			retry = v.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			qf = v
		case error:
			t.Fatalf("a detail does not decode: %v", v)
		}
	}
	if retry < 0 {
		t.Fatalf("%v carries no RetryInfo", err)
	}
	return retry, qf
}

// Five calls a minute per user: each allowed call reports the fields in
// its header metadata, the sixth ends ResourceExhausted with a RetryInfo
// holding the exact wait (12s, a token's refill), retry-after 12, and the
// call never reaches the service. Another user has a budget of their own;
// once the wait has passed, the first user gets one call.
func TestUnaryDenialCarriesRetryInfo(t *testing.T) {
	s := newServer(t, []sluice.Rule{checkRule}, serverOpts{})
	for i := range 5 {
		md, err := s.check(t, "x-user-id", "ann")
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		left := strconv.Itoa(4 - i)
		want := map[string]string{
			MetadataLimit: "5", MetadataRemaining: left, MetadataReset: strconv.Itoa(12 * (i + 1)),
			MetadataPolicy: `"check";q=5;w=60`, MetadataRateLimit: `"check";r=` + left + ";t=" + strconv.Itoa(12*(i+1)), MetadataRetryAfter: "",
		}
		for k, v := range want {
			if got := get(t, md, k); got != v {
				t.Errorf("call %d: %s = %q, want %q", i+1, k, got, v)
			}
		}
	}
	md, err := s.check(t, "x-user-id", "ann")
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("sixth call: %v, want ResourceExhausted", err)
	}
	if msg := status.Convert(err).Message(); msg != "rate limit exceeded for rule check" {
		t.Errorf("message %q", msg)
	}
	retry, qf := retryInfo(t, err)
	if retry != 12*time.Second {
		t.Errorf("RetryInfo.retry_delay = %v, want 12s", retry)
	}
	if qf == nil || len(qf.Violations) != 1 || qf.Violations[0].Subject != "rule:check" {
		t.Errorf("QuotaFailure = %v, want one violation of rule:check", qf)
	}
	if got := get(t, md, MetadataRetryAfter); got != "12" {
		t.Errorf("retry-after = %q, want 12", got)
	}
	if got := get(t, md, MetadataRateLimit); got != `"check";r=0;t=12` { // the reset is retry-after's
		t.Errorf("ratelimit on the denial = %q", got)
	}
	if _, err := s.check(t, "x-user-id", "bob"); err != nil {
		t.Errorf("another user: %v, want allowed", err)
	}
	s.clock.Advance(retry - time.Nanosecond)
	if _, err := s.check(t, "x-user-id", "ann"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a nanosecond before the retry delay: %v, want ResourceExhausted", err)
	}
	s.clock.Advance(time.Nanosecond)
	if _, err := s.check(t, "x-user-id", "ann"); err != nil {
		t.Errorf("after the retry delay: %v, want allowed", err)
	}
	snap, _ := s.metrics.Snapshot().Rule("check")
	if snap.Allowed != 7 || snap.Denied != 2 {
		t.Errorf("metrics: %d allowed, %d denied; want 7 and 2", snap.Allowed, snap.Denied)
	}
}

// A stream is decided once, when it opens: its messages are not counted,
// and a denied stream's first Recv is the ResourceExhausted status with
// its RetryInfo, the header metadata carrying retry-after. A rule on the
// service's prefix covers both methods on one budget.
func TestStreamIsDecidedWhenItOpens(t *testing.T) {
	svc := sluice.Rule{Name: "health", PathPrefix: healthSvc, Scope: sluice.ScopeUser, Algorithm: "fixed_window", Limit: 3, Window: time.Minute}
	s := newServer(t, []sluice.Rule{svc}, serverOpts{})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-user-id", "ann")
	for i := range 2 {
		sctx, cancel := context.WithCancel(ctx)
		stream, err := s.client.Watch(sctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// Several messages on one stream.
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("stream %d, first message: %v", i+1, err)
		}
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("stream %d, second message: %v", i+1, err)
		}
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		hdr, err := stream.Header()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := get(t, hdr, MetadataRemaining), strconv.Itoa(2-i); got != want {
			t.Errorf("stream %d: x-ratelimit-remaining = %q, want %s", i+1, got, want)
		}
		cancel()
	}
	// The Check call spends from the same budget: the last of three.
	if md, err := s.check(t, "x-user-id", "ann"); err != nil || get(t, md, MetadataRemaining) != "0" {
		t.Fatalf("Check after two streams: %v, remaining %q; want allowed, 0", err, get(t, md, MetadataRemaining))
	}
	stream, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("fourth call, a stream: %v, want ResourceExhausted", err)
	}
	// The fixed window opened at t0, a whole minute: the wait is the
	// whole window.
	if retry, _ := retryInfo(t, err); retry != time.Minute {
		t.Errorf("RetryInfo = %v, want 1m", retry)
	}
	hdr, err := stream.Header()
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, hdr, MetadataRetryAfter); got != "60" {
		t.Errorf("denied stream: retry-after = %q, want 60", got)
	}
	if snap, _ := s.metrics.Snapshot().Rule("health"); snap.Allowed != 3 || snap.Denied != 1 {
		t.Errorf("metrics: %d allowed, %d denied; want 3 and 1 (one per stream, not per message)", snap.Allowed, snap.Denied)
	}
}

// The metadata keys of identity are the Identifier's header names, case
// aside; a rule naming an HTTP method never covers a gRPC call, and a call
// no rule covers passes without metadata.
func TestIdentityFromMetadataAndMatching(t *testing.T) {
	tenant := sluice.Rule{Name: "tenant", PathPrefix: "/grpc.health.v1.", Scope: sluice.ScopeUser, Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	httpOnly := sluice.Rule{Name: "http-only", Method: "POST", PathPrefix: "/", Scope: sluice.ScopeGlobal, Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	keyed := sluice.Rule{Name: "keyed", PathPrefix: "/grpc.health.v1.Health/List", Scope: sluice.ScopeAPIKey, Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	s := newServer(t, []sluice.Rule{tenant, httpOnly, keyed}, serverOpts{mode: sluice.MatchAll, idCfg: identity.Config{UserHeader: "X-Tenant"}})
	for _, u := range []string{"a", "b", "c"} {
		if _, err := s.check(t, "X-Tenant", u); err != nil {
			t.Errorf("tenant %s: %v, want allowed (its own budget, and the POST rule covers no gRPC call)", u, err)
		}
	}
	if _, err := s.check(t, "x-tenant", "a"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("tenant a again: %v, want ResourceExhausted", err)
	}
	// x-user-id is not the configured key: the caller is anonymous and
	// counted by its address, once.
	if _, err := s.check(t, "x-user-id", "a"); err != nil {
		t.Errorf("anonymous: %v, want allowed", err)
	}
	if _, err := s.check(t, "x-user-id", "z"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("anonymous from the same address: %v, want ResourceExhausted", err)
	}
	if _, err := s.check(t, "x-tenant", "d", "x-tenant", "e"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("an identity key sent twice: %v, want InvalidArgument", err)
	} else if msg := status.Convert(err).Message(); msg != "bad caller identity: metadata given more than once: x-tenant" {
		t.Errorf("an identity key sent twice: message %q, want it said once, in metadata's terms", msg)
	}
	if _, err := s.check(t, "x-tenant", strings.Repeat("u", identity.MaxUserIDLen+1)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a user id too long: %v, want InvalidArgument", err)
	}
	// API keys: x-api-key by default.
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "k1", "x-tenant", "f")
	var hdr metadata.MD
	if _, err := s.client.List(ctx, &healthpb.HealthListRequest{}, grpc.Header(&hdr)); err != nil || get(t, hdr, MetadataPolicy) == "" {
		t.Errorf("List with an API key: %v, policy %q; want allowed and limited", err, get(t, hdr, MetadataPolicy))
	}
	if _, err := s.client.List(ctx, &healthpb.HealthListRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("List with the same API key: %v, want ResourceExhausted", err)
	}
	// A method no rule covers.
	s.reg.Swap(mustRuleset(t, []sluice.Rule{keyed}, nil, ""))
	if md, err := s.check(t); err != nil || len(md.Get(MetadataPolicy)) != 0 {
		t.Errorf("a method no rule covers: %v, metadata %v; want allowed, no rate-limit fields", err, md)
	}
}

func mustRuleset(t *testing.T, rules []sluice.Rule, def *sluice.Rule, mode sluice.MatchMode) *sluice.Ruleset {
	t.Helper()
	rs, err := sluice.NewRuleset(rules, def, mode)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// The peer's address keys an ip rule; x-forwarded-for is believed only
// from a trusted proxy, walked from the right.
func TestPeerAddressAndTrustedProxy(t *testing.T) {
	perIP := sluice.Rule{Name: "per-ip", PathPrefix: "/", Scope: sluice.ScopeIP, Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	untrusted := newServer(t, []sluice.Rule{perIP}, serverOpts{})
	if _, err := untrusted.check(t, "x-forwarded-for", "203.0.113.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := untrusted.check(t, "x-forwarded-for", "203.0.113.2"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("untrusted peer, another forwarded address: %v, want ResourceExhausted (the header is ignored)", err)
	}

	trusted := newServer(t, []sluice.Rule{perIP}, serverOpts{idCfg: identity.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	for _, xff := range []string{"203.0.113.1", "198.51.100.9, 203.0.113.2"} {
		if _, err := trusted.check(t, "x-forwarded-for", xff); err != nil {
			t.Errorf("trusted peer, x-forwarded-for %q: %v, want allowed (a client of its own)", xff, err)
		}
	}
	if _, err := trusted.check(t, "x-forwarded-for", "10.9.9.9, 203.0.113.2"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("trusted peer, a spoofed left-hand address: %v, want ResourceExhausted (the client is 203.0.113.2)", err)
	}
	if _, err := trusted.check(t); err != nil {
		t.Errorf("trusted peer, no x-forwarded-for: %v, want allowed (the peer itself)", err)
	}
}

// An IdentityFunc's caller replaces the metadata; its status error ends
// the call with that status, a panic with Internal, logged.
func TestIdentityFunc(t *testing.T) {
	type userKey struct{}
	rule := sluice.Rule{Name: "u", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	s := newServer(t, []sluice.Rule{rule}, serverOpts{config: func(c *Config) {
		c.Identity = func(ctx context.Context, method string) (identity.Caller, error) {
			if method != checkMethod {
				t.Errorf("IdentityFunc given %q, want %q", method, checkMethod)
			}
			switch v := metadata.ValueFromIncomingContext(ctx, "token"); {
			case len(v) == 0:
				return identity.Caller{}, status.Error(codes.Unauthenticated, "no token")
			case v[0] == "boom":
				panic("token parser")
			default:
				return identity.Caller{UserID: "sub-" + v[0]}, nil
			}
		}
	}})
	if _, err := s.check(t, "token", "1", "x-user-id", "spoof"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.check(t, "token", "1", "x-user-id", "other"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("same token, another x-user-id: %v, want ResourceExhausted (the metadata is not read)", err)
	}
	if _, err := s.check(t, "token", "2"); err != nil {
		t.Errorf("another token: %v, want allowed", err)
	}
	if _, err := s.check(t); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v, want the IdentityFunc's Unauthenticated", err)
	}
	if _, err := s.check(t, "token", "boom"); status.Code(err) != codes.Internal {
		t.Errorf("a panicking IdentityFunc: %v, want Internal", err)
	}
	if !strings.Contains(s.logs.String(), "token parser") {
		t.Errorf("the panic was not logged: %s", s.logs)
	}
}

var errDiskOnFire = errors.New("disk on fire")

// A store that fails follows OnStoreError: open passes the call without
// metadata, closed ends it Unavailable, local decides it on the rule's
// share; each counts the store error under its policy, and once the store
// heals limiting resumes on the shared budget.
func TestStoreFailurePolicies(t *testing.T) {
	for _, policy := range sluice.StoreErrorPolicies {
		t.Run(string(policy), func(t *testing.T) {
			localEng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(t0)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { localEng.Close() })
			local, err := sluice.NewLocalFallback(localEng, 2) // a fleet of two: limit 3 of 5
			if err != nil {
				t.Fatal(err)
			}
			s := newServer(t, []sluice.Rule{checkRule}, serverOpts{config: func(c *Config) {
				c.OnStoreError, c.Local = policy, local
			}})
			id, err := s.faults.Add(faulty.Rule{Ops: faulty.Writes, Err: errDiskOnFire})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				md, err := s.check(t, "x-user-id", "ann")
				switch policy {
				case sluice.FailOpen:
					if err != nil || len(md.Get(MetadataPolicy)) != 0 {
						t.Fatalf("open, call %d: %v, metadata %v; want allowed without rate-limit fields", i+1, err, md)
					}
				case sluice.FailClosed:
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("closed, call %d: %v, want Unavailable", i+1, err)
					}
				case sluice.FailLocal:
					if i < 3 && (err != nil || get(t, md, MetadataLimit) != "3") {
						t.Fatalf("local, call %d: %v, limit %q; want allowed under the share of 3", i+1, err, get(t, md, MetadataLimit))
					}
					if i == 3 {
						if status.Code(err) != codes.ResourceExhausted {
							t.Fatalf("local, call 4: %v, want ResourceExhausted (the share is spent)", err)
						}
						// A share of 3 a minute refills one every 20s.
						if retry, _ := retryInfo(t, err); retry != 20*time.Second {
							t.Errorf("local denial: RetryInfo %v, want 20s", retry)
						}
					}
				}
			}
			snap := s.metrics.Snapshot()
			r, _ := snap.Rule("check")
			switch policy {
			case sluice.FailOpen:
				if r.StoreErrorsOpen != 4 || r.Allowed+r.Denied != 0 {
					t.Errorf("open: %+v, want 4 store errors and no decision", r)
				}
			case sluice.FailClosed:
				if r.StoreErrorsClosed != 4 || r.Allowed+r.Denied != 0 {
					t.Errorf("closed: %+v, want 4 store errors and no decision", r)
				}
			case sluice.FailLocal:
				if r.StoreErrorsLocal != 4 || r.LocalAllowed != 3 || r.LocalDenied != 1 || r.Allowed != 3 || r.Denied != 1 {
					t.Errorf("local: %+v, want 4 store errors, 3 allowed and 1 denied locally", r)
				}
			}
			if !strings.Contains(s.logs.String(), "disk on fire") {
				t.Errorf("the store error was not logged: %s", s.logs)
			}
			s.faults.Remove(id)
			for i := range 5 {
				if _, err := s.check(t, "x-user-id", "ann"); err != nil {
					t.Fatalf("healed, call %d: %v, want allowed (nothing was spent on the store)", i+1, err)
				}
			}
			if _, err := s.check(t, "x-user-id", "ann"); status.Code(err) != codes.ResourceExhausted {
				t.Errorf("healed, sixth call: %v, want ResourceExhausted", err)
			}
		})
	}
}

// A shadow rule is decided and counted but never denies, and sends no
// metadata unless ShadowMetadata is set; beside an enforced rule on the
// same method it is decided only for the calls the enforced rule lets
// through, and the metadata is the enforced rule's.
func TestShadowRules(t *testing.T) {
	tight := sluice.Rule{Name: "check-tight", PathPrefix: checkMethod, Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 2, Window: time.Minute, Shadow: true}

	alone := newServer(t, []sluice.Rule{tight}, serverOpts{})
	for i := range 4 {
		md, err := alone.check(t, "x-user-id", "ann")
		if err != nil || len(md.Get(MetadataPolicy)) != 0 || len(md.Get(MetadataRetryAfter)) != 0 {
			t.Fatalf("shadow alone, call %d: %v, metadata %v; want allowed, no rate-limit fields", i+1, err, md)
		}
	}
	if r, _ := alone.metrics.Snapshot().Rule("check-tight"); r.Allowed != 2 || r.Denied != 0 || r.ShadowDenied != 2 {
		t.Errorf("shadow alone: %+v, want 2 allowed, 0 denied, 2 would-be denials", r)
	}

	shown := newServer(t, []sluice.Rule{tight}, serverOpts{config: func(c *Config) { c.ShadowMetadata = true }})
	for i := range 3 {
		md, err := shown.check(t, "x-user-id", "ann")
		if err != nil || get(t, md, MetadataPolicy) != `"check-tight";q=2;w=60` || len(md.Get(MetadataRetryAfter)) != 0 {
			t.Fatalf("ShadowMetadata, call %d: %v, metadata %v; want allowed, the shadow rule's fields, no retry-after", i+1, err, md)
		}
		if i == 2 && get(t, md, MetadataRemaining) != "0" {
			t.Errorf("ShadowMetadata, a would-be denial: remaining %q, want 0", get(t, md, MetadataRemaining))
		}
	}

	both := newServer(t, []sluice.Rule{checkRule, tight}, serverOpts{})
	for i := range 5 {
		md, err := both.check(t, "x-user-id", "ann")
		if err != nil || get(t, md, MetadataPolicy) != `"check";q=5;w=60` {
			t.Fatalf("enforced and shadow, call %d: %v, policy %q; want allowed under the enforced rule", i+1, err, get(t, md, MetadataPolicy))
		}
	}
	if _, err := both.check(t, "x-user-id", "ann"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("enforced and shadow, call 6: %v, want the enforced rule's denial", err)
	}
	snap := both.metrics.Snapshot()
	if r, _ := snap.Rule("check-tight"); r.Allowed != 2 || r.ShadowDenied != 3 || r.Denied != 0 {
		t.Errorf("the shadow rule: %+v, want 2 allowed and 3 would-be denials (the refused call is not decided)", r)
	}
	if r, _ := snap.Rule("check"); r.Allowed != 5 || r.Denied != 1 {
		t.Errorf("the enforced rule: %+v, want 5 allowed, 1 denied: the shadow rule changed nothing", r)
	}

	// A store error under a shadow rule never refuses the call, even
	// under the closed policy; it is counted as open.
	closed := newServer(t, []sluice.Rule{tight}, serverOpts{config: func(c *Config) { c.OnStoreError = sluice.FailClosed }})
	if _, err := closed.faults.Add(faulty.Rule{Ops: faulty.Writes, Err: errDiskOnFire}); err != nil {
		t.Fatal(err)
	}
	if _, err := closed.check(t, "x-user-id", "ann"); err != nil {
		t.Errorf("a shadow rule's store error under closed: %v, want allowed", err)
	}
	if r, _ := closed.metrics.Snapshot().Rule("check-tight"); r.StoreErrorsOpen != 1 || r.StoreErrorsClosed != 0 {
		t.Errorf("a shadow rule's store error: %+v, want counted as open", r)
	}
}

// A reload (Registry.Swap) applies from the next call; a rule that keeps
// its name and algorithm keeps what callers spent.
func TestHotReload(t *testing.T) {
	s := newServer(t, []sluice.Rule{checkRule}, serverOpts{})
	for range 3 {
		if _, err := s.check(t, "x-user-id", "ann"); err != nil {
			t.Fatal(err)
		}
	}
	wider := checkRule
	wider.Limit = 10 // one token every 6s; 3 spent of 10
	s.reg.Swap(mustRuleset(t, []sluice.Rule{wider}, nil, ""))
	md, err := s.check(t, "x-user-id", "ann")
	if err != nil || get(t, md, MetadataLimit) != "10" || get(t, md, MetadataRemaining) != "6" {
		t.Fatalf("after a wider reload: %v, limit %q remaining %q; want allowed, 10 and 6", err, get(t, md, MetadataLimit), get(t, md, MetadataRemaining))
	}
	narrower := checkRule
	narrower.Limit = 4
	s.reg.Swap(mustRuleset(t, []sluice.Rule{narrower}, nil, ""))
	if _, err := s.check(t, "x-user-id", "ann"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("after a narrower reload (4 spent of 4): %v, want ResourceExhausted", err)
	}
	s.reg.Swap(mustRuleset(t, []sluice.Rule{{Name: "other", PathPrefix: "/other.Service/", Scope: sluice.ScopeGlobal, Algorithm: "gcra", Limit: 1, Window: time.Hour}}, nil, ""))
	if md, err := s.check(t, "x-user-id", "ann"); err != nil || len(md) != 0 && len(md.Get(MetadataPolicy)) != 0 {
		t.Errorf("after a reload that covers the method no more: %v, %v; want allowed without fields", err, md)
	}
}

// In all mode every matching rule decides together: nothing is spent
// unless all allow, and the call reports the most restrictive decision.
// A leaky bucket's delay is waited before the handler.
func TestAllModeAndDelay(t *testing.T) {
	perUser := sluice.Rule{Name: "per-user", PathPrefix: healthSvc, Scope: sluice.ScopeUser, Algorithm: "fixed_window", Limit: 3, Window: time.Minute}
	global := sluice.Rule{Name: "global", PathPrefix: "/", Scope: sluice.ScopeGlobal, Algorithm: "leaky_bucket", Limit: 60, Window: time.Minute, Burst: 4}
	s := newServer(t, []sluice.Rule{perUser, global}, serverOpts{mode: sluice.MatchAll})
	for i := range 3 {
		md, err := s.check(t, "x-user-id", "ann")
		if err != nil || get(t, md, MetadataPolicy) != `"per-user";q=3;w=60` {
			t.Fatalf("call %d: %v, policy %q; want allowed, the per-user rule (least remaining)", i+1, err, get(t, md, MetadataPolicy))
		}
	}
	if _, err := s.check(t, "x-user-id", "ann"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call 4: %v, want the per-user denial", err)
	}
	// The denied call spent nothing on the global bucket: one more caller
	// fits its burst of 4.
	md, err := s.check(t, "x-user-id", "bob")
	// The global quota is its burst of 4, back whole in 4 s.
	if err != nil || get(t, md, MetadataPolicy) != `"global";q=4;w=4` {
		t.Fatalf("bob: %v, policy %q; want allowed under the global rule (its fourth)", err, get(t, md, MetadataPolicy))
	}
	s.mu.Lock()
	waited := append([]time.Duration(nil), s.waited...)
	s.mu.Unlock()
	// A leaky bucket of 1 a second: the k-th queued call waits k-1 seconds.
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if len(waited) != len(want) {
		t.Fatalf("waited %v, want %v", waited, want)
	}
	for i := range want {
		if waited[i] != want[i] {
			t.Errorf("waited %v, want %v", waited, want)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	reg := sluice.NewRegistry(nil)
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Registry: reg}, "Engine is required"},
		{Config{Engine: eng}, "Registry is required"},
		{Config{Engine: eng, Registry: reg, OnStoreError: "maybe"}, `got "maybe"`},
		{Config{Engine: eng, Registry: reg, OnStoreError: sluice.FailLocal}, "Local is required"},
	} {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tt.cfg, err, tt.want)
		}
	}
}

// With DenialMetadataOnly an allowed call carries no rate-limit metadata
// and a denied one carries it all.
func TestDenialMetadataOnly(t *testing.T) {
	s := newServer(t, []sluice.Rule{checkRule}, serverOpts{config: func(c *Config) { c.DenialMetadataOnly = true }})
	for i := range 5 {
		md, err := s.check(t, "x-user-id", "ann")
		if err != nil || len(md.Get(MetadataPolicy)) != 0 || len(md.Get(MetadataRateLimit)) != 0 {
			t.Fatalf("call %d: %v, metadata %v; want allowed without rate-limit fields", i+1, err, md)
		}
	}
	md, err := s.check(t, "x-user-id", "ann")
	if status.Code(err) != codes.ResourceExhausted || get(t, md, MetadataRetryAfter) != "12" || get(t, md, MetadataRateLimit) != `"check";r=0;t=12` {
		t.Errorf("denied: %v, metadata %v; want ResourceExhausted with retry-after 12 and ratelimit", err, md)
	}
}

// A rule naming a host covers the calls whose :authority is that host.
func TestHostRule(t *testing.T) {
	here, elsewhere := checkRule, checkRule
	here.Name, here.Host, here.Limit = "here", "127.0.0.1", 1
	elsewhere.Name, elsewhere.Host = "elsewhere", "rpc.example.com"
	s := newServer(t, []sluice.Rule{here, elsewhere}, serverOpts{})
	md, err := s.check(t, "x-user-id", "ann")
	if err != nil || get(t, md, MetadataPolicy) != `"here";q=1;w=60` {
		t.Fatalf("a call to 127.0.0.1: %v, policy %q; want the rule of its host", err, get(t, md, MetadataPolicy))
	}
	if _, err := s.check(t, "x-user-id", "ann"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("the second of 1: %v", err)
	}
}
