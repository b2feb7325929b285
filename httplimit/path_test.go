package httplimit

import (
	"testing"

	"github.com/sluice-go/sluice"
)

// Every spelling of /api/orders spends, and is denied on, the budget of
// the rule on /api/orders: the middleware matches the canonical path.
func TestPathSpellingsSpendOneBudget(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{})
	spellings := []string{"//api/orders", "/api//orders", "/api/./orders", "/api/x/../orders", "/api/%2e%2e/api/orders", "/api%2Forders", "/api/orders/"}
	for i, p := range spellings[:5] {
		if w := f.do("POST", p, "192.0.2.1:1", "X-User-ID", "m"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != []string{"4", "3", "2", "1", "0"}[i] {
			t.Fatalf("POST %s (order %d): %d, remaining %q", p, i+1, w.Code, w.Header().Get("X-RateLimit-Remaining"))
		}
	}
	for _, p := range append([]string{"/api/orders"}, spellings...) {
		if w := f.do("POST", p, "192.0.2.1:1", "X-User-ID", "m"); w.Code != 429 {
			t.Errorf("POST %s after five orders: %d, want 429", p, w.Code)
		}
	}
	if got, want := f.calls.Load(), int64(5); got != want {
		t.Errorf("handler called %d times, want %d", got, want)
	}
}

// HEAD spends on a GET rule; a HEAD rule of the same prefix takes it over.
func TestHeadSpendsOnTheGetRule(t *testing.T) {
	f := newFixture(t, []sluice.Rule{searchRule}, fixtureOpts{})
	for i, m := range []string{"HEAD", "GET"} {
		if w := f.do(m, "/api/search", "192.0.2.1:1", "X-User-ID", "h"); w.Code != 200 {
			t.Fatalf("%s /api/search (%d): %d, want 200", m, i+1, w.Code)
		}
	}
	for _, m := range []string{"HEAD", "GET"} {
		if w := f.do(m, "/api/search", "192.0.2.1:1", "X-User-ID", "h"); w.Code != 429 {
			t.Errorf("%s /api/search with the search budget spent: %d, want 429", m, w.Code)
		}
	}
	head := searchRule
	head.Name, head.Method, head.Cost = "search-head", "HEAD", 1
	rs, err := sluice.NewRuleset([]sluice.Rule{searchRule, head}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	f.reg.Swap(rs)
	if w := f.do("HEAD", "/api/search", "192.0.2.1:1", "X-User-ID", "h"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "9" {
		t.Errorf("HEAD /api/search under a HEAD rule: %d, remaining %q, want 200 and 9 of the HEAD rule's", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
}

// With path_case insensitive, a path in any case spends the rule's budget.
func TestPathCaseInsensitiveSpendsOneBudget(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{})
	if w := f.do("POST", "/API/Orders", "192.0.2.1:1", "X-User-ID", "c"); w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "" {
		t.Fatalf("case-sensitive: POST /API/Orders: %d, limit %q, want 200 and no rule", w.Code, w.Header().Get("X-RateLimit-Limit"))
	}
	rs, err := sluice.NewRulesetWith([]sluice.Rule{ordersRule}, nil, sluice.RulesetOptions{PathCase: sluice.PathCaseInsensitive})
	if err != nil {
		t.Fatal(err)
	}
	f.reg.Swap(rs)
	for i, p := range []string{"/API/Orders", "/Api/ORDERS", "//api/Orders", "/api/orders", "/API/orders/1"} {
		if w := f.do("POST", p, "192.0.2.1:1", "X-User-ID", "c"); w.Code != 200 {
			t.Fatalf("insensitive: POST %s (order %d): %d, want 200", p, i+1, w.Code)
		}
	}
	if w := f.do("POST", "/aPi/oRdErS", "192.0.2.1:1", "X-User-ID", "c"); w.Code != 429 {
		t.Errorf("insensitive: POST /aPi/oRdErS after five orders: %d, want 429", w.Code)
	}
}
