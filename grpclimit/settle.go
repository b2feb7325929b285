package grpclimit

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice"
)

// Costs settled after the call (sluice.Rule.Settle): a call is decided on
// its estimate (the rule's Cost, or Config.Cost's), and once the handler
// has returned, the interceptors settle it with the actual cost from the
// response trailer named by Settle.ActualTrailer (grpc.SetTrailer in a
// unary handler, ServerStream.SetTrailer in a streaming one; a whole
// number of zero or more, the last value set):
//
//   - with the trailer's value when the handler set it;
//   - with zero when it did not and the handler returned an error (the
//     call failed: nothing done to count);
//   - not at all when the call succeeded without it, or when its context
//     ended first (the client went away, or its deadline passed): the
//     estimate stands.
//
// Limit (go-grpc-middleware's ratelimit.Limiter) does not see the call
// end: a call it admits keeps its estimate.

// trailerStream is a unary call's grpc.ServerTransportStream, keeping what
// the handler sets as its trailer.
type trailerStream struct {
	grpc.ServerTransportStream
	mu sync.Mutex // guards md
	md metadata.MD
}

// SetTrailer keeps md and passes it on.
func (t *trailerStream) SetTrailer(md metadata.MD) error {
	t.mu.Lock()
	t.md = metadata.Join(t.md, md)
	t.mu.Unlock()
	if t.ServerTransportStream == nil {
		return nil
	}
	return t.ServerTransportStream.SetTrailer(md)
}

// trailer returns what the handler set as its trailer.
func (t *trailerStream) trailer() metadata.MD {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.md
}

// trailerServerStream is a stream's grpc.ServerStream, keeping what the
// handler sets as its trailer.
type trailerServerStream struct {
	grpc.ServerStream
	mu sync.Mutex // guards md
	md metadata.MD
}

// SetTrailer keeps md and passes it on.
func (t *trailerServerStream) SetTrailer(md metadata.MD) {
	t.mu.Lock()
	t.md = metadata.Join(t.md, md)
	t.mu.Unlock()
	t.ServerStream.SetTrailer(md)
}

// trailer returns what the handler set as its trailer.
func (t *trailerServerStream) trailer() metadata.MD {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.md
}

// settle settles out's reservations once the call has ended with err,
// its trailer md.
func (l *Limiter) settle(ctx context.Context, out *sluice.Outcome, md metadata.MD, err error) {
	if ctx.Err() != nil {
		l.door.Settle(ctx, out, func(*sluice.CompiledRule) (int64, bool) { return 0, false })
		return
	}
	l.door.Settle(context.WithoutCancel(ctx), out, func(rule *sluice.CompiledRule) (int64, bool) {
		name := rule.Settle().ActualTrailer
		if name != "" {
			if v := md.Get(strings.ToLower(name)); len(v) > 0 {
				if n, ok := sluice.ParseCost(strings.TrimSpace(v[len(v)-1])); ok {
					return n, true
				}
			}
		}
		if err != nil {
			return 0, true
		}
		return 0, false
	})
}
