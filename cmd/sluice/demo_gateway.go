package main

// This file puts the demo's gateway together from the real parts: the
// reference design's rules in a sluice.Registry, package identity's
// Identifier and httplimit's middleware with metrics.Metrics counting, in front of a trivial handler on
// a loopback httptest server that the demo talks to with net/http's client.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/metrics"
)

// demoRules are the reference design's rules; demoDefault covers whatever
// no rule matches, counted by IP.
var (
	demoRules = []sluice.Rule{
		{Name: "orders-write", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: 5, Window: time.Minute},
		{Name: "search", Method: "GET", PathPrefix: "/api/search", Scope: sluice.ScopeUser, Algorithm: algo.SlidingCounterName, Limit: 10, Window: time.Minute, Cost: 5},
	}
	demoDefault = sluice.Rule{Name: "catch-all", Scope: sluice.ScopeIP, Algorithm: algo.SlidingCounterName, Limit: 100, Window: time.Minute}
)

// gateway is the rate-limited HTTP server the demo sends its requests to.
type gateway struct {
	rules   *sluice.Ruleset
	metrics *metrics.Metrics
	srv     *httptest.Server
	client  *http.Client
}

// newGateway starts a loopback HTTP server that limits requests with eng
// under demoRules before a handler that answers "ok".
func newGateway(eng *engine.Engine) (*gateway, error) {
	rs, err := sluice.NewRuleset(demoRules, &demoDefault, sluice.MatchMostSpecific)
	if err != nil {
		return nil, err
	}
	id, err := identity.New(identity.Config{})
	if err != nil {
		return nil, err
	}
	counts := metrics.New(nil)
	limit, err := httplimit.New(httplimit.Config{
		Engine:     eng,
		Registry:   sluice.NewRegistry(rs),
		Identifier: id,
		Metrics:    counts,
		// A store error is answered 503, which ends the demo: its figures
		// would mean nothing.
		OnStoreError: sluice.FailClosed,
	})
	if err != nil {
		return nil, err
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(limit(ok))
	return &gateway{rules: rs, metrics: counts, srv: srv, client: srv.Client()}, nil
}

// Close stops the server.
func (g *gateway) Close() {
	g.client.CloseIdleConnections()
	g.srv.Close()
}

// rule returns the rule (or default) named name, as compiled.
func (g *gateway) rule(name string) sluice.Rule { return g.rules.Rule(name).Rule() }

// demoResponse is what the gateway answered.
type demoResponse struct {
	status int
	body   string
	header http.Header
}

// send sends a request for method and path (which may carry a query), as the
// user userID or, when it is empty, anonymously. An answer other than 200 or
// 429 is an error.
func (g *gateway) send(method, path, userID string) (demoResponse, error) {
	req, err := http.NewRequest(method, g.srv.URL+path, nil)
	if err != nil {
		return demoResponse{}, err
	}
	if userID != "" {
		req.Header.Set(identity.DefaultUserHeader, userID)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return demoResponse{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return demoResponse{}, fmt.Errorf("%s %s: reading the body: %w", method, path, err)
	}
	r := demoResponse{status: resp.StatusCode, body: strings.TrimSpace(string(body)), header: resp.Header}
	if r.status != http.StatusOK && r.status != http.StatusTooManyRequests {
		return r, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, r.body)
	}
	return r, nil
}

// formatHeaders renders the headers named that h holds as
// "Name: value, Name: value", the names as given.
func formatHeaders(h http.Header, names ...string) string {
	var parts []string
	for _, n := range names {
		if v := h.Get(n); v != "" {
			parts = append(parts, n+": "+v)
		}
	}
	return strings.Join(parts, ", ")
}

// rateLimitHeaders are the headers the demo shows, in order.
var rateLimitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "Retry-After"}

// formatMetrics renders the per-rule counters, rules in name order.
func (g *gateway) formatMetrics() (string, error) {
	s := g.metrics.Snapshot()
	if n := s.StoreErrors(); n > 0 {
		return "", fmt.Errorf("the store failed %d times", n)
	}
	if len(s.Rules) == 0 {
		return "", errors.New("no rule decided anything")
	}
	parts := make([]string, len(s.Rules))
	for i, r := range s.Rules {
		parts[i] = fmt.Sprintf("%s: %d allowed / %d denied", r.Name, r.Allowed, r.Denied)
	}
	return strings.Join(parts, ", "), nil
}
