// Package ratefield makes the rate-limit fields every door sends of a
// decision: package httplimit as response headers, package grpclimit as
// response metadata under the same names in lower case, package envoyrls as
// the headers it asks Envoy to add. A door keeps its protocol's container
// (http.Header, metadata.MD, Envoy's header values); the values are made
// here, once:
//
//	X-RateLimit-Limit      Set.Limit: the capacity
//	X-RateLimit-Remaining  Set.Remaining
//	X-RateLimit-Reset      Set.Reset: seconds until the capacity is whole
//	RateLimit-Policy       Policy.Field: "orders";q=5;w=60
//	RateLimit              Set.R and Set.T: "orders";r=3;t=24
//	Retry-After            Set.RetryAfter, on a denial only
//
// RateLimit-Policy and RateLimit are the IETF draft's
// (draft-ietf-httpapi-ratelimit-headers): the policy is named as a
// structured field string (RFC 8941, AppendString); q and w are
// algo.Quota's quota and window, r is the decision's Remaining, and t is
// algo.QuotaReset. Every duration is in whole seconds, rounded up
// (CeilSeconds); a denial's Retry-After and t are never below 1, since 0
// would invite an immediate retry.
package ratefield

import (
	"strconv"
	"time"

	"github.com/sluice-go/sluice/algo"
)

// Policy is what a rule's fields carry whatever the decision: made once per
// rule (NewPolicy), read by every decision under it.
type Policy struct {
	// Field is the RateLimit-Policy value: "orders";q=5;w=60.
	Field string
	// Window is the quota's window (algo.Quota), which caps RateLimit's t.
	Window time.Duration

	prefix string // RateLimit's value up to r's number: "orders";r=
}

// NewPolicy returns the Policy of a rule named name whose quota is quota
// units a window (algo.Quota's).
func NewPolicy(name string, quota int64, window time.Duration) Policy {
	sf := AppendString(nil, name)
	b := append([]byte(nil), sf...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, quota, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, CeilSeconds(window), 10)
	return Policy{Field: string(b), Window: window, prefix: string(append(sf, ";r="...))}
}

// Set is the rate-limit field set of one decision under a Policy: the
// number each field carries.
type Set struct {
	// Limit is X-RateLimit-Limit: the capacity.
	Limit int64
	// Remaining is X-RateLimit-Remaining.
	Remaining int64
	// Reset is X-RateLimit-Reset, in seconds (or, where a door says so, a
	// Unix time).
	Reset int64
	// R and T are RateLimit's r (what may be spent now) and t (the
	// seconds until the quota is whole, or on a denial until the request
	// would pass).
	R, T int64
	// RetryAfter is Retry-After in seconds; 0 sends none.
	RetryAfter int64
	// NoReset leaves out X-RateLimit-Reset, RateLimit's t and Retry-After:
	// there is no time after which the request passes.
	NoReset bool
}

// Of returns the field set of d, a decision under p: d.Limit,
// d.Remaining, the seconds until d.Reset, and on a denial (d.Allowed
// false) a Retry-After of RetryAfterSeconds, which RateLimit's t is too;
// allowed, t is the seconds until algo.QuotaReset.
func (p *Policy) Of(d algo.Decision) Set {
	s := Set{Limit: d.Limit, Remaining: d.Remaining, Reset: CeilSeconds(d.Reset), R: d.Remaining}
	if d.Allowed {
		s.T = CeilSeconds(algo.QuotaReset(d, p.Window))
	} else {
		s.RetryAfter = RetryAfterSeconds(d)
		s.T = s.RetryAfter
	}
	return s
}

// The fields' values, by their index in Ends.
const (
	Limit = iota
	Remaining
	Reset
	RateLimit
	RetryAfter
	NumValues // how many values Append writes
)

// Ends says where each value Append wrote ends, by index (Limit,
// Remaining, …): value i is b[Ends[i-1]:Ends[i]], the first from where
// Append began. A value not sent is empty.
type Ends [NumValues]int

// Append appends the values of s's fields under p to b, one after the
// other in the order of Ends' indices, and returns the extended slice and
// where each ends: a door makes one string of them and cuts it (Cut), so
// that a decision's fields cost one allocation however many there are.
// RateLimit-Policy is p.Field, made once.
func (p *Policy) Append(b []byte, s *Set) ([]byte, Ends) {
	var e Ends
	b = strconv.AppendInt(b, s.Limit, 10)
	e[Limit] = len(b)
	b = strconv.AppendInt(b, s.Remaining, 10)
	e[Remaining] = len(b)
	if !s.NoReset {
		b = strconv.AppendInt(b, s.Reset, 10)
	}
	e[Reset] = len(b)
	b = p.AppendRateLimit(b, s)
	e[RateLimit] = len(b)
	if s.RetryAfter > 0 && !s.NoReset {
		b = strconv.AppendInt(b, s.RetryAfter, 10)
	}
	e[RetryAfter] = len(b)
	return b, e
}

// AppendRateLimit appends s's RateLimit value under p to b:
// "orders";r=3;t=24, without t when s.NoReset.
func (p *Policy) AppendRateLimit(b []byte, s *Set) []byte {
	b = append(b, p.prefix...)
	b = strconv.AppendInt(b, s.R, 10)
	if s.NoReset {
		return b
	}
	b = append(b, ";t="...)
	return strconv.AppendInt(b, s.T, 10)
}

// Cut returns the values in v, a string of the bytes Append wrote from
// its start, by index.
func (e *Ends) Cut(v string) [NumValues]string {
	var vals [NumValues]string
	start := 0
	for i, end := range e {
		vals[i] = v[start:end]
		start = end
	}
	return vals
}

// RetryAfterSeconds returns Retry-After for d, a denial: the seconds until
// the same request would pass, rounded up, and at least 1.
func RetryAfterSeconds(d algo.Decision) int64 { return max(1, CeilSeconds(d.RetryAfter)) }

// CeilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// AppendString appends s to b as a structured field string (RFC 8941
// section 3.3.3): in double quotes, with '"' and '\' escaped. A byte a
// string may not hold (a control, DEL, non-ASCII) becomes '?'.
func AppendString(b []byte, s string) []byte {
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
