package httplimit

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// spend sends n orders of user and returns the last answer.
func (f *fixture) spend(user string, n int) (code int, reset string) {
	for range n - 1 {
		f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", user)
	}
	w := f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", user)
	return w.Code, w.Header().Get("X-RateLimit-Reset")
}

// DenyStatus and ProblemDetails: the status and body a denial is answered
// with, as operators of nginx (limit_req_status) and of RFC 9457 clients
// expect; the rate-limit fields stay.
func TestDenyStatusAndProblemDetails(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{config: func(c *Config) { c.DenyStatus = 503; c.ProblemDetails = true }})
	for range 5 {
		f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "alice")
	}
	w := f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "alice")
	if w.Code != 503 || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Retry-After") != "12" {
		t.Fatalf("denial: %d %v", w.Code, w.Header())
	}
	var p struct {
		Type, Title, Detail, Rule string
		Status                    int
		Limit, Remaining          int64
		RetryAfter                int64 `json:"retry_after"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if p.Status != 503 || p.Rule != "orders-write" || p.Limit != 5 || p.RetryAfter != 12 || p.Type != "about:blank" || p.Title != "Service Unavailable" {
		t.Errorf("problem details %+v", p)
	}
	if _, err := New(Config{Engine: f.eng, Registry: f.reg, DenyStatus: 302}); err == nil {
		t.Error("DenyStatus 302 accepted")
	}
}

// ResetAsUnixTime: X-RateLimit-Reset as the Unix time the capacity is
// whole again.
func TestResetAsUnixTime(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{config: func(c *Config) { c.ResetAsUnixTime = true }})
	_, reset := f.spend("alice", 2)
	got, err := strconv.ParseInt(reset, 10, 64)
	want := time.Unix(0, f.clock.Now()).Add(24 * time.Second).Unix() // 2 of 5 at 5 a minute
	if err != nil || got != want {
		t.Errorf("X-RateLimit-Reset %q, want the Unix time %d", reset, want)
	}
}

// Exempt: a caller no rule limits passes without being decided, in both
// match modes; others are limited as before.
func TestExempt(t *testing.T) {
	for _, mode := range []sluice.MatchMode{sluice.MatchMostSpecific, sluice.MatchAll} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{mode: mode, config: func(c *Config) {
				c.Exempt = func(key string) bool { return key == "user:alice" }
			}})
			for i := range 8 {
				w := f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "alice")
				if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "" {
					t.Fatalf("exempt alice's order %d: %d %v", i+1, w.Code, w.Header())
				}
			}
			if code, _ := f.spend("bob", 6); code != 429 {
				t.Errorf("bob's sixth order: %d, want 429: he is not exempt", code)
			}
		})
	}
}

// Rules by host: a request is matched with its Host (port and case left
// out), so one gateway limits each virtual host by its own rules.
func TestHostRule(t *testing.T) {
	eu := sluice.Rule{Name: "eu-orders", Host: "eu.example.com", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 1, Window: time.Minute}
	f := newFixture(t, []sluice.Rule{ordersRule, eu}, fixtureOpts{})
	do := func(host string) (int, string) {
		req := httptest.NewRequest("POST", "http://"+host+"/api/orders", nil)
		req.RemoteAddr = "192.0.2.1:1"
		req.Header.Set("X-User-ID", "carol")
		w := httptest.NewRecorder()
		f.handler.ServeHTTP(w, req)
		return w.Code, w.Header().Get("RateLimit-Policy")
	}
	if code, policy := do("EU.example.com:8443"); code != 200 || !strings.HasPrefix(policy, `"eu-orders"`) {
		t.Errorf("eu's first: %d %q, want its own rule", code, policy)
	}
	if code, _ := do("eu.example.com"); code != 429 {
		t.Errorf("eu's second of 1: %d", code)
	}
	if code, policy := do("us.example.com"); code != 200 || !strings.HasPrefix(policy, `"orders-write"`) {
		t.Errorf("another host: %d %q, want the host-less rule", code, policy)
	}
}
