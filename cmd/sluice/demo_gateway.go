package main

// This file is the demo's stand-in for an HTTP gateway: a rule table, the
// caller's identity, the X-RateLimit headers and per-rule counters, kept
// apart from the rest of the demo so that the real middleware can replace
// it whole.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// gatewayRule is one configured limit: which requests it covers, per whom,
// how much.
type gatewayRule struct {
	name       string
	method     string // "GET", "POST", or "*" for any
	pathPrefix string
	scope      string // "user", "api_key", "ip" or "global": what one caller is
	algorithm  string
	limit      int64
	window     time.Duration
}

// demoRules are the reference design's three rules; the last is the default
// that covers whatever no other rule matches.
var demoRules = []gatewayRule{
	{name: "orders-write", method: "POST", pathPrefix: "/api/orders", scope: "user", algorithm: algo.TokenBucketName, limit: 5, window: time.Minute},
	{name: "search", method: "GET", pathPrefix: "/api/search", scope: "user", algorithm: algo.SlidingCounterName, limit: 10, window: time.Minute},
	{name: "catch-all", method: "*", pathPrefix: "/", scope: "ip", algorithm: algo.SlidingCounterName, limit: 100, window: time.Minute},
}

// demoRequest is the slice of an HTTP request the gateway reads.
type demoRequest struct {
	method, path string
	clientIP     string
	userID       string // empty for an anonymous caller
	apiKey       string
	cost         int64
}

// header is one response header.
type header struct{ name, value string }

// demoResponse is what the gateway answers.
type demoResponse struct {
	status  int
	body    string
	headers []header
}

// ruleCounters are one rule's allowed and denied counts.
type ruleCounters struct{ allowed, denied int }

// gateway finds the rule for a request, works out whose budget it is, asks
// the engine and answers 200 or 429 with the rate-limit headers.
type gateway struct {
	eng     *engine.Engine
	rules   []gatewayRule  // most specific first
	limits  []engine.Limit // limits[i] applies rules[i]
	def     int            // index of the default rule, or -1
	metrics map[string]*ruleCounters
}

// newGateway builds a gateway over eng from rules. The rule named
// defaultRule, if any, covers requests no other rule matches.
func newGateway(eng *engine.Engine, rules []gatewayRule, defaultRule string) (*gateway, error) {
	g := &gateway{eng: eng, def: -1, metrics: map[string]*ruleCounters{}}
	g.rules = append([]gatewayRule(nil), rules...)
	// Most specific first: the longest path, then an exact method over "*".
	sort.SliceStable(g.rules, func(i, j int) bool {
		a, b := g.rules[i], g.rules[j]
		if len(a.pathPrefix) != len(b.pathPrefix) {
			return len(a.pathPrefix) > len(b.pathPrefix)
		}
		return a.method != "*" && b.method == "*"
	})
	for i, r := range g.rules {
		a, err := algo.New(r.algorithm, algo.Params{Limit: r.limit, Window: r.window})
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", r.name, err)
		}
		g.limits = append(g.limits, engine.Limit{Namespace: r.name, Algorithm: a})
		if r.name == defaultRule {
			g.def = i
		}
	}
	return g, nil
}

// ruleFor returns the index of the rule covering method and path, or -1.
func (g *gateway) ruleFor(method, path string) int {
	for i, r := range g.rules {
		if i != g.def && (r.method == "*" || r.method == method) && strings.HasPrefix(path, r.pathPrefix) {
			return i
		}
	}
	return g.def
}

// identity returns whose budget a request spends under scope. An anonymous
// caller under a per-user or per-key rule falls back to its IP: keying all
// of them alike would give them one shared budget.
func identity(req demoRequest, scope string) string {
	switch {
	case scope == "user" && req.userID != "":
		return "user|" + req.userID
	case scope == "api_key" && req.apiKey != "":
		return "api_key|" + req.apiKey
	case scope == "global":
		return "global|all"
	}
	return "ip|" + req.clientIP
}

// serve answers one request; next is the handler behind the gateway.
func (g *gateway) serve(req demoRequest, next func(demoRequest) demoResponse) (demoResponse, error) {
	i := g.ruleFor(req.method, req.path)
	if i < 0 {
		return next(req), nil // unlimited routes are a configuration choice
	}
	rule := g.rules[i]
	cost := req.cost
	if cost == 0 {
		cost = 1
	}
	d, err := g.eng.Apply(g.limits[i], identity(req, rule.scope), cost)
	if err != nil {
		return demoResponse{}, fmt.Errorf("rule %s: %w", rule.name, err)
	}
	c := g.metrics[rule.name]
	if c == nil {
		c = &ruleCounters{}
		g.metrics[rule.name] = c
	}
	if !d.Allowed {
		c.denied++
		return demoResponse{status: 429, body: "rate limit exceeded for rule " + rule.name, headers: rateLimitHeaders(d)}, nil
	}
	c.allowed++
	resp := next(req)
	resp.headers = append(resp.headers, rateLimitHeaders(d)...)
	return resp, nil
}

// rateLimitHeaders renders a decision as response headers. Retry-After is
// whole seconds rounded up and never 0: a client reading 0 retries at once
// and is denied again.
func rateLimitHeaders(d algo.Decision) []header {
	h := []header{
		{"X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10)},
		{"X-RateLimit-Remaining", strconv.FormatInt(max(0, d.Remaining), 10)},
	}
	if !d.Allowed {
		secs := max(1, (d.RetryAfter+time.Second-1)/time.Second)
		h = append(h, header{"Retry-After", strconv.FormatInt(int64(secs), 10)})
	}
	return h
}

// formatHeaders renders headers as "Name: value, Name: value".
func formatHeaders(hs []header) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.name + ": " + h.value
	}
	return strings.Join(parts, ", ")
}

// headerValue returns the value of the header named name, or "".
func headerValue(hs []header, name string) string {
	for _, h := range hs {
		if h.name == name {
			return h.value
		}
	}
	return ""
}

// formatMetrics renders the per-rule counters, rules in name order.
func (g *gateway) formatMetrics() string {
	names := make([]string, 0, len(g.metrics))
	for n := range g.metrics {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		c := g.metrics[n]
		parts[i] = fmt.Sprintf("%s: %d allowed / %d denied", n, c.allowed, c.denied)
	}
	return strings.Join(parts, ", ")
}

// rule returns the rule named name.
func (g *gateway) rule(name string) gatewayRule {
	for _, r := range g.rules {
		if r.name == name {
			return r
		}
	}
	return gatewayRule{}
}
