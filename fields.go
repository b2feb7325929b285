package sluice

import (
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/ratefield"
)

// The rate-limit fields are what a door tells a client of a decision under
// a rule: package httplimit sends them as response headers, package
// grpclimit as response metadata under the same names in lower case,
// package envoyrls as the headers it asks Envoy to add. Their values are
// made by one function of a decision (package internal/ratefield), the
// same for every door:
//
//	X-RateLimit-Limit      Decision.Limit: the capacity
//	X-RateLimit-Remaining  Decision.Remaining
//	X-RateLimit-Reset      Decision.Reset in seconds, rounded up: until the capacity is whole again
//	RateLimit-Policy       CompiledRule.Policy: "orders";q=5;w=60
//	RateLimit              CompiledRule.AppendRateLimit: "orders";r=3;t=24
//	Retry-After            RetryAfterSeconds, on a denial only
//
// RateLimit-Policy and RateLimit are the IETF draft's
// (draft-ietf-httpapi-ratelimit-headers): the policy is named by the rule,
// as a structured field string (RFC 8941) in which '"' and '\' are escaped
// and a byte a string may not hold (a control, non-ASCII) becomes '?'; q
// and w are algo.Quota's quota and window, r is Remaining, and t is
// algo.QuotaReset. Every duration is in whole seconds, rounded up; a
// denial's Retry-After and t are never below 1, since 0 would invite an
// immediate retry.

// Policy returns the rule's RateLimit-Policy field: its name, the quota
// (the capacity) and the quota's window in seconds, "orders";q=5;w=60. It
// is made once, when the rule is compiled.
func (c *CompiledRule) Policy() string { return c.fields.Field }

// AppendRateLimit appends the RateLimit field of d, a decision under c, to
// b and returns the extended slice: the rule's name, d.Remaining and the
// seconds until the quota is whole again (on a denial, until the request
// would pass: RetryAfterSeconds), "orders";r=3;t=24.
func (c *CompiledRule) AppendRateLimit(b []byte, d algo.Decision) []byte {
	s := c.fields.Of(d)
	return c.fields.AppendRateLimit(b, &s)
}

// FieldPolicy returns what c's rate-limit fields carry whatever the
// decision, for the module's doors to render a decision's fields with
// (ratefield.Policy.Of and Append). It is made once, when the rule is
// compiled.
func (c *CompiledRule) FieldPolicy() *ratefield.Policy { return &c.fields }

// RetryAfterSeconds returns Retry-After for d, a denial: the seconds until
// the same request would pass, rounded up, and at least 1.
func RetryAfterSeconds(d algo.Decision) int64 { return ratefield.RetryAfterSeconds(d) }

// compileFields makes the parts of c's fields that do not depend on a
// decision.
func (c *CompiledRule) compileFields() {
	quota, window := algo.Quota(c.limit.Algorithm)
	c.fields = ratefield.NewPolicy(c.rule.Name, quota, window)
}
