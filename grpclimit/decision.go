package grpclimit

import (
	"context"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// Decision is the rate-limit decision a call was admitted with, as its
// handler finds it with DecisionFrom: the answer (Allowed, Limit,
// Remaining, Reset) and the rule that decided (the matching rule, the one
// the metadata reports, in all mode the most restrictive). It is the
// decision every door puts in a handler's context, HTTP's too.
type Decision = sluice.RuleDecision

// withDecision returns ctx carrying rule's decision d.
func withDecision(ctx context.Context, rule *sluice.CompiledRule, d algo.Decision) context.Context {
	return sluice.WithDecision(ctx, rule, d)
}

// decisionStream is a stream whose Context carries its Decision.
type decisionStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context, with its Decision.
func (s *decisionStream) Context() context.Context { return s.ctx }

// DecisionFrom returns the rate-limit decision of the call whose context
// ctx is (or derives from), as the Limiter's interceptors made it with
// Config.DecisionInContext: a handler reads what the caller has left
// (Remaining) and when the budget is whole again (Reset), as
// httplimit.DecisionFrom gives an HTTP handler. ok is false for a call no
// rule decided (none covered it, or the store failed and it was let
// through), and without Config.DecisionInContext.
func DecisionFrom(ctx context.Context) (d Decision, ok bool) {
	return sluice.DecisionFromContext(ctx)
}
