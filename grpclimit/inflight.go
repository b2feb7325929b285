package grpclimit

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/inflight"
)

// InFlightConfig configures the interceptors of NewInFlight.
type InFlightConfig struct {
	// Engine holds the slots. Required. Over Redis the limit is the
	// fleet's.
	Engine *engine.Engine
	// Limit is a concurrency limit (algo.ConcurrencyName): at most its
	// Limit calls of a key in flight, each holding its slot for at most
	// its Window (the maximum hold). Required.
	Limit engine.Limit
	// Key returns the key whose slots the call of ctx takes; nil means
	// the peer's IP address as package identity keys it. An error ends
	// the call with codes.InvalidArgument when it matches
	// identity.ErrBadIdentity, codes.Internal otherwise.
	Key func(ctx context.Context, fullMethod string) (string, error)
	// RetryAfter is the wait a refused call is told, in its retry-after
	// metadata (whole seconds, at least 1); zero means
	// sluice.DefaultRetryAfter.
	RetryAfter time.Duration
	// OnStoreError is what happens to a call when the store fails:
	// sluice.FailOpen (the default when empty) lets it through holding no
	// slot, sluice.FailClosed ends it with codes.Unavailable.
	OnStoreError sluice.StoreErrorPolicy
	// Logger receives store errors (at most a line a second); nil means
	// slog.Default().
	Logger *slog.Logger
}

// InFlight limits the calls in flight: a unary call holds a slot while
// its handler runs, a stream from its opening until its handler returns
// (the stream has ended, or the client has gone and the handler has seen
// its context end). A call finding every slot taken ends at once with
// codes.ResourceExhausted and the configured retry-after: nothing queues.
type InFlight struct {
	gate *inflight.Gate // takes, counts and gives back the slots
	key  func(context.Context, string) (string, error)
}

// NewInFlight returns the interceptors' state. It fails when Engine is
// missing, Limit is not a concurrency limit, RetryAfter is negative or
// OnStoreError is not FailOpen or FailClosed.
func NewInFlight(cfg InFlightConfig) (*InFlight, error) {
	gate, err := inflight.New("sluice/grpclimit", cfg.Engine, cfg.Limit, cfg.RetryAfter, cfg.OnStoreError, cfg.Logger)
	if err != nil {
		return nil, err
	}
	f := &InFlight{gate: gate, key: cfg.Key}
	if f.key == nil {
		id, err := identity.New(identity.Config{})
		if err != nil {
			return nil, err
		}
		f.key = func(ctx context.Context, method string) (string, error) {
			return callerKey(ctx, id, nil, method, sluice.ScopeIP)
		}
	}
	return f, nil
}

// Held returns the slots the interceptors hold now (a gauge for metrics).
func (f *InFlight) Held() int64 { return f.gate.Held() }

// UnaryServerInterceptor returns the interceptor for unary calls.
func (f *InFlight) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		release, err := f.acquire(ctx, info.FullMethod, func(md metadata.MD) { grpc.SetHeader(ctx, md) })
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns the interceptor for streams: a stream
// holds its slot for as long as it is open.
func (f *InFlight) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		release, err := f.acquire(ss.Context(), info.FullMethod, func(md metadata.MD) { ss.SetHeader(md) })
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}

// acquire takes the call's slot and returns what gives it back, or the
// error that ends the call.
func (f *InFlight) acquire(ctx context.Context, method string, header func(metadata.MD)) (func(), error) {
	key, err := inflight.Key(f.key(ctx, method))
	if err != nil {
		if errors.Is(err, identity.ErrBadIdentity) {
			return nil, status.Error(codes.InvalidArgument, "bad caller identity")
		}
		return nil, status.Error(codes.Internal, "rate limiter cannot identify the caller")
	}
	ls := new(engine.Lease)
	switch v := f.gate.Take(ctx, key, ls); {
	case v == sluice.Allowed:
		return func() { f.gate.Release(ctx, ls) }, nil
	case v == sluice.Denied:
		header(metadata.Pairs(MetadataRetryAfter, f.gate.RetryAfter()))
		return nil, status.Error(codes.ResourceExhausted, "too many calls in flight")
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case v == sluice.Passed: // FailOpen: on, holding no slot
		return func() {}, nil
	case v == sluice.Unavailable:
		return nil, status.Error(codes.Unavailable, unavailable)
	}
	return nil, status.Error(codes.Internal, "rate limiter error") // logged by the Decider
}
