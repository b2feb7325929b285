package grpclimit

import (
	"context"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// Decision is the rate-limit decision a call was admitted with, as its
// handler finds it with DecisionFrom.
type Decision struct {
	// Decision is the answer: Allowed, Limit, Remaining and Reset.
	algo.Decision
	// Rule is the rule that decided: the matching rule (the one the
	// metadata reports, in all mode the most restrictive).
	Rule *sluice.CompiledRule
}

// decisionKey is the context key of a call's Decision.
type decisionKey struct{}

// decisionContext is a context carrying a Decision: one allocation where
// context.WithValue would take two (the context and the boxed value).
type decisionContext struct {
	context.Context
	d Decision
}

// Value returns the Decision for decisionKey, and the parent's values.
func (c *decisionContext) Value(key any) any {
	if key == (decisionKey{}) {
		return &c.d
	}
	return c.Context.Value(key)
}

// withDecision returns ctx carrying rule's decision d.
func withDecision(ctx context.Context, rule *sluice.CompiledRule, d algo.Decision) context.Context {
	return &decisionContext{Context: ctx, d: Decision{Decision: d, Rule: rule}}
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
	p, ok := ctx.Value(decisionKey{}).(*Decision)
	if !ok {
		return Decision{}, false
	}
	return *p, true
}
