package sluice

import (
	"strconv"
	"time"

	"github.com/sluice-go/sluice/algo"
)

// The rate-limit fields are what a door tells a client of a decision under
// a rule: package httplimit sends them as response headers, package
// grpclimit as response metadata under the same names in lower case. Their
// values are made here, the same for every door:
//
//	X-RateLimit-Limit      Decision.Limit: the capacity
//	X-RateLimit-Remaining  Decision.Remaining
//	X-RateLimit-Reset      ResetSeconds: until the capacity is whole again
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
func (c *CompiledRule) Policy() string { return c.policy }

// AppendRateLimit appends the RateLimit field of d, a decision under c, to
// b and returns the extended slice: the rule's name, d.Remaining and the
// seconds until the quota is whole again (on a denial, until the request
// would pass: RetryAfterSeconds), "orders";r=3;t=24.
func (c *CompiledRule) AppendRateLimit(b []byte, d algo.Decision) []byte {
	b = append(b, c.rateLimit...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, ";t="...)
	if !d.Allowed {
		return strconv.AppendInt(b, RetryAfterSeconds(d), 10)
	}
	return strconv.AppendInt(b, ceilSeconds(algo.QuotaReset(d, c.window)), 10)
}

// ResetSeconds returns X-RateLimit-Reset for d: the seconds until the
// capacity is whole again, rounded up.
func ResetSeconds(d algo.Decision) int64 { return ceilSeconds(d.Reset) }

// RetryAfterSeconds returns Retry-After for d, a denial: the seconds until
// the same request would pass, rounded up, and at least 1.
func RetryAfterSeconds(d algo.Decision) int64 { return max(1, ceilSeconds(d.RetryAfter)) }

// compileFields makes the parts of c's fields that do not depend on a
// decision.
func (c *CompiledRule) compileFields() {
	quota, window := algo.Quota(c.limit.Algorithm)
	name := appendSFString(nil, c.rule.Name)
	b := append([]byte(nil), name...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, quota, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, ceilSeconds(window), 10)
	c.policy = string(b)
	c.rateLimit = string(append(name, ";r="...))
	c.window = window
}

// appendSFString appends s as a structured field string (RFC 8941): in
// double quotes, with '"' and '\' escaped. Bytes a string may not hold
// (controls, non-ASCII) become '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
