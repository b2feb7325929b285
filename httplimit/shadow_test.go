package httplimit

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
)

// A shadow rule is decided and counted but never answers 429, and sets no
// headers unless ShadowHeaders; beside an enforced rule on the same route
// it is decided only for the requests the enforced rule lets through.
func TestShadowRules(t *testing.T) {
	tight := sluice.Rule{Name: "orders-tight", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 2, Window: time.Minute, Shadow: true}

	alone := newFixture(t, []sluice.Rule{tight}, fixtureOpts{})
	for i := range 4 {
		w := alone.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "ann")
		if w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" || w.Header().Get("Retry-After") != "" {
			t.Fatalf("shadow alone, request %d: %d, headers %v; want 200 without rate limit headers", i+1, w.Code, w.Header())
		}
	}
	if r, _ := alone.metrics.Snapshot().Rule("orders-tight"); r.Allowed != 2 || r.Denied != 0 || r.ShadowDenied != 2 {
		t.Errorf("shadow alone: %+v, want 2 allowed, 2 would-be denials", r)
	}

	shown := newFixture(t, []sluice.Rule{tight}, fixtureOpts{config: func(c *Config) { c.ShadowHeaders = true }})
	for i := range 3 {
		w := shown.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "ann")
		if w.Code != http.StatusOK || w.Header().Get("RateLimit-Policy") != `"orders-tight";q=2;w=60` || w.Header().Get("Retry-After") != "" {
			t.Fatalf("ShadowHeaders, request %d: %d, headers %v; want 200, the shadow rule's headers, no Retry-After", i+1, w.Code, w.Header())
		}
	}

	both := newFixture(t, []sluice.Rule{ordersRule, tight}, fixtureOpts{})
	for i := range 5 {
		if w := both.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "ann"); w.Code != http.StatusOK || w.Header().Get("RateLimit-Policy") != `"orders-write";q=5;w=60` {
			t.Fatalf("enforced and shadow, request %d: %d, policy %q; want 200 under orders-write", i+1, w.Code, w.Header().Get("RateLimit-Policy"))
		}
	}
	if w := both.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "ann"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("request 6: %d, want the enforced 429", w.Code)
	}
	if r, _ := both.metrics.Snapshot().Rule("orders-tight"); r.Allowed != 2 || r.ShadowDenied != 3 {
		t.Errorf("the shadow rule: %+v, want 2 allowed, 3 would-be denials", r)
	}
	if both.calls.Load() != 5 {
		t.Errorf("handler called %d times, want 5", both.calls.Load())
	}
}

// A caller's override applies under a shadow rule as under any other, and
// a store error under a shadow rule never refuses the request, whatever
// OnStoreError says.
func TestShadowOverrideAndStoreError(t *testing.T) {
	tight := sluice.Rule{Name: "orders-tight", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 2, Window: time.Minute, Shadow: true}
	f := newFixture(t, []sluice.Rule{tight}, fixtureOpts{})
	rs, err := f.reg.Ruleset().WithOverrides([]sluice.Override{{Rule: "orders-tight", Key: "user:ann", Limit: 4}})
	if err != nil {
		t.Fatal(err)
	}
	f.reg.Swap(rs)
	for range 6 {
		if w := f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "ann"); w.Code != http.StatusOK {
			t.Fatalf("ann under the shadow rule: %d, want 200", w.Code)
		}
		if w := f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "bob"); w.Code != http.StatusOK {
			t.Fatalf("bob under the shadow rule: %d, want 200", w.Code)
		}
	}
	// ann's override allows 4 of her 6, bob the rule's 2 of his 6.
	if r, _ := f.metrics.Snapshot().Rule("orders-tight"); r.Allowed != 6 || r.ShadowDenied != 6 {
		t.Errorf("with ann's override: %+v, want 6 allowed (4+2), 6 would-be denials (2+4)", r)
	}

	var faults *faulty.Faults
	broken := newFixture(t, []sluice.Rule{tight}, fixtureOpts{
		backend: func() (engineBackend, error) {
			b, fs := faulty.Wrap(memory.New(nil))
			faults = fs
			return b, nil
		},
		config: func(c *Config) { c.OnStoreError = sluice.FailClosed },
	})
	if _, err := faults.Add(faulty.Rule{Err: errors.New("disk on fire")}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if w := broken.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "ann"); w.Code != http.StatusOK {
			t.Fatalf("store down, request %d under the shadow rule alone with FailClosed: %d, want 200", i+1, w.Code)
		}
	}
	if snap := broken.metrics.Snapshot(); snap.StoreErrorsOpen != 3 || snap.StoreErrorsClosed != 0 || broken.calls.Load() != 3 {
		t.Errorf("store down: %d open and %d closed store errors, handler called %d times; want 3, 0, 3", snap.StoreErrorsOpen, snap.StoreErrorsClosed, broken.calls.Load())
	}
}
