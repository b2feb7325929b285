package sluice

import (
	"context"

	"github.com/sluice-go/sluice/algo"
)

// RuleDecision is the decision a request was admitted (or answered) with,
// and the rule that made it: what a door puts in a handler's context
// (httplimit.DecisionFrom, grpclimit.DecisionFrom).
type RuleDecision struct {
	// Decision is the answer: Allowed, Limit, Remaining, Reset and, on a
	// denial, RetryAfter.
	algo.Decision
	// Rule is the rule that decided: the matching rule (the one the
	// headers or metadata report, in all mode the most restrictive), or a
	// Limiter's Rule.
	Rule *CompiledRule
}

// decisionKey is the context key of a request's RuleDecision.
type decisionKey struct{}

// decisionContext is a context carrying a RuleDecision: one allocation
// where context.WithValue would take two (the context and the boxed
// value).
type decisionContext struct {
	context.Context
	d RuleDecision
}

// Value returns the RuleDecision for decisionKey, and the parent's values.
func (c *decisionContext) Value(key any) any {
	if key == (decisionKey{}) {
		return &c.d
	}
	return c.Context.Value(key)
}

// WithDecision returns ctx carrying rule's decision d, for
// DecisionFromContext: the one place the doors put a decision in a
// handler's context.
func WithDecision(ctx context.Context, rule *CompiledRule, d algo.Decision) context.Context {
	return &decisionContext{Context: ctx, d: RuleDecision{Decision: d, Rule: rule}}
}

// DecisionFromContext returns the decision WithDecision put in ctx (or a
// context derived from it); ok is false when there is none.
func DecisionFromContext(ctx context.Context) (d RuleDecision, ok bool) {
	p, ok := ctx.Value(decisionKey{}).(*RuleDecision)
	if !ok {
		return RuleDecision{}, false
	}
	return *p, true
}
