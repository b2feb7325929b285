package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/identity"
)

// planRules are orders for everyone (5) and for premium callers (50).
func planRules() []sluice.Rule {
	premium := ordersRule
	premium.Name, premium.Limit, premium.Plan = "orders-premium", 50, "premium"
	return []sluice.Rule{ordersRule, premium}
}

// statuses sends n requests and returns their status codes.
func (f *fixture) statuses(n int, method, path, remote string, headers ...string) string {
	f.t.Helper()
	var out []int
	for range n {
		out = append(out, f.do(method, path, remote, headers...).Code)
	}
	return fmt.Sprint(out)
}

// The plan from a trusted proxy's header picks the plan's rule; from a
// client the header is ignored.
func TestPlanFromTrustedHeader(t *testing.T) {
	f := newFixture(t, planRules(), fixtureOpts{idCfg: identity.Config{
		PlanHeader:     "X-Sluice-Plan",
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")},
	}})
	w := f.do("POST", "/api/orders", "10.0.0.1:1", "X-User-ID", "alice", "X-Sluice-Plan", "premium")
	if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"orders-premium";q=50;w=60` {
		t.Fatalf("premium through the proxy: %d, policy %q; want 200 under orders-premium", w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// A client sending the header itself stays on no plan.
	if got := f.statuses(6, "POST", "/api/orders", "203.0.113.5:1", "X-User-ID", "bob", "X-Sluice-Plan", "premium"); got != "[200 200 200 200 200 429]" {
		t.Errorf("a client claiming premium: %s, want the plan-less 5", got)
	}
	// A bad plan from the proxy is a bad identity.
	if w := f.do("POST", "/api/orders", "10.0.0.1:1", "X-User-ID", "alice", "X-Sluice-Plan", "pre mium"); w.Code != 400 {
		t.Errorf("an invalid plan: %d, want 400", w.Code)
	}
	if w := f.do("POST", "/api/orders", "10.0.0.1:1", "X-User-ID", "alice", "X-Sluice-Plan", "a", "X-Sluice-Plan", "b"); w.Code != 400 {
		t.Errorf("two plan headers: %d, want 400", w.Code)
	}
}

// The IdentityFunc's Caller.Plan picks the plan's rule; its errors and
// panics are answered as for a key.
func TestPlanFromIdentityFunc(t *testing.T) {
	f := newFixture(t, planRules(), fixtureOpts{identify: func(r *http.Request) (identity.Caller, error) {
		switch r.Header.Get("Token") {
		case "panic":
			panic("broken")
		case "error":
			return identity.Caller{}, errors.New("no session store")
		case "bad":
			return identity.Caller{}, fmt.Errorf("%w: expired token", identity.ErrBadIdentity)
		}
		user, plan, _ := strings.Cut(r.Header.Get("Token"), "/")
		return identity.Caller{UserID: user, Plan: plan}, nil
	}})
	if got := f.statuses(7, "POST", "/api/orders", "203.0.113.5:1", "Token", "alice/premium"); got != "[200 200 200 200 200 200 200]" {
		t.Errorf("premium alice: %s, want all 7 under 50", got)
	}
	if got := f.statuses(6, "POST", "/api/orders", "203.0.113.5:1", "Token", "bob"); got != "[200 200 200 200 200 429]" {
		t.Errorf("bob on no plan: %s, want 5", got)
	}
	// A plan no rule names is no plan.
	if got := f.statuses(6, "POST", "/api/orders", "203.0.113.5:1", "Token", "carol/gold"); got != "[200 200 200 200 200 429]" {
		t.Errorf("carol on gold: %s, want the plan-less 5", got)
	}
	for token, want := range map[string]int{"panic": 500, "error": 500, "bad": 400, "dave/x y": 400} {
		if w := f.do("POST", "/api/orders", "203.0.113.5:1", "Token", token); w.Code != want {
			t.Errorf("token %q: %d, want %d", token, w.Code, want)
		}
	}
	if f.calls.Load() != 7+5+5 {
		t.Errorf("handler called %d times, want %d", f.calls.Load(), 7+5+5)
	}
}

// An override gives one caller its own limit, reported in its headers;
// everyone else keeps the rule. A reload changing the override keeps what
// the caller spent.
func TestOverrideThroughTheMiddleware(t *testing.T) {
	for _, mode := range []sluice.MatchMode{sluice.MatchMostSpecific, sluice.MatchAll} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{mode: mode})
			base := f.reg.Ruleset()
			withLimit := func(n int64) *sluice.Ruleset {
				t.Helper()
				rs, err := base.WithOverrides([]sluice.Override{{Rule: "orders-write", Key: "user:alice", Limit: n}})
				if err != nil {
					t.Fatal(err)
				}
				return rs
			}
			f.reg.Swap(withLimit(8))
			w := f.do("POST", "/api/orders", "203.0.113.5:1", "X-User-ID", "alice")
			if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"orders-write";q=8;w=60` || w.Header().Get("X-RateLimit-Remaining") != "7" {
				t.Fatalf("alice: %d policy %q remaining %q, want 200 under her 8 with 7 left", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("X-RateLimit-Remaining"))
			}
			if got := f.statuses(8, "POST", "/api/orders", "203.0.113.5:1", "X-User-ID", "alice"); got != "[200 200 200 200 200 200 200 429]" {
				t.Errorf("alice's next 8: %s, want 7 more", got)
			}
			if got := f.statuses(6, "POST", "/api/orders", "203.0.113.5:1", "X-User-ID", "bob"); got != "[200 200 200 200 200 429]" {
				t.Errorf("bob: %s, want the rule's 5", got)
			}
			// Raised to 10: 2 more, not a fresh 10.
			f.reg.Swap(withLimit(10))
			if got := f.statuses(3, "POST", "/api/orders", "203.0.113.5:1", "X-User-ID", "alice"); got != "[200 200 429]" {
				t.Errorf("alice raised to 10 after 8 spent: %s, want 2 more", got)
			}
		})
	}
}
