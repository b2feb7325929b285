package httplimit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/metrics"
)

// mwT0 is the start of every fixed timeline: a whole minute.
var mwT0 = time.Unix(1_700_000_040, 0)

var (
	ordersRule = sluice.Rule{Name: "orders-write", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 5, Window: time.Minute}
	searchRule = sluice.Rule{Name: "search", Method: "GET", PathPrefix: "/api/search", Scope: sluice.ScopeUser, Algorithm: "sliding_counter", Limit: 10, Window: time.Minute, Cost: 5}
)

// fixture is a middleware over a memory engine with a fake clock, in front
// of a handler that counts its calls.
type fixture struct {
	t       *testing.T
	clock   *engine.FakeClock
	eng     *engine.Engine
	reg     *sluice.Registry
	metrics *metrics.Metrics
	logs    *syncBuffer
	calls   atomic.Int64
	handler http.Handler // the middleware around the counting handler
}

type fixtureOpts struct {
	mode     sluice.MatchMode
	def      *sluice.Rule
	idCfg    identity.Config
	identify IdentityFunc
	backend  func() (engineBackend, error)
	config   func(*Config)
}

// engineBackend is what engine.New takes.
type engineBackend = interface {
	Get(key []byte, now int64) ([]byte, error)
	Put(key, value []byte, expiresAt int64) error
	Delete(key []byte) error
	Close() error
}

// syncBuffer is a bytes.Buffer safe for a logger used by several requests.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newFixture(t *testing.T, rules []sluice.Rule, o fixtureOpts) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: engine.NewFakeClock(mwT0), metrics: metrics.New(nil), logs: &syncBuffer{}}
	var b engineBackend = memory.New(nil)
	if o.backend != nil {
		var err error
		if b, err = o.backend(); err != nil {
			t.Fatal(err)
		}
	}
	eng, err := engine.New(b, &engine.Options{Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	f.eng = eng
	rs, err := sluice.NewRuleset(rules, o.def, o.mode)
	if err != nil {
		t.Fatal(err)
	}
	f.reg = sluice.NewRegistry(rs)
	id, err := identity.New(o.idCfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Engine:     eng,
		Registry:   f.reg,
		Identifier: id,
		Identity:   o.identify,
		Metrics:    f.metrics,
		Logger:     slog.New(slog.NewTextHandler(f.logs, nil)),
	}
	if o.config != nil {
		o.config(&cfg)
	}
	mw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.handler = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		io.WriteString(w, "ok")
	}))
	return f
}

// do sends a request through the middleware with httptest.NewRecorder.
func (f *fixture) do(method, path, remote string, headers ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	return w
}

// doHTTP sends a request to srv over real HTTP.
func doHTTP(t *testing.T, srv *httptest.Server, method, path string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

var rateHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"}

func wantNoRateHeaders(t *testing.T, h http.Header) {
	t.Helper()
	for _, k := range rateHeaders {
		if v, ok := h[http.CanonicalHeaderKey(k)]; ok {
			t.Errorf("unexpected header %s: %q", k, v)
		}
	}
}

func TestOrdersScenario(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule, searchRule}, fixtureOpts{})
	srv := httptest.NewServer(f.handler)
	defer srv.Close()

	for i := range 5 {
		resp := doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", "alice")
		if body := readBody(t, resp); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q, want 200", i+1, resp.StatusCode, body)
		}
		if i == 1 {
			wantHeaders(t, resp.Header, map[string]string{
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "3",
				"X-RateLimit-Reset":     "24",
				"RateLimit-Policy":      `"orders-write";q=5;w=60`,
				"RateLimit":             `"orders-write";r=3;t=24`,
				"Retry-After":           "",
			})
		}
	}
	for range 2 {
		resp := doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", "alice")
		body := readBody(t, resp)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("6th request: %d, want 429", resp.StatusCode)
		}
		if strings.TrimSpace(body) != "rate limit exceeded for rule orders-write" {
			t.Errorf("body %q", body)
		}
		wantHeaders(t, resp.Header, map[string]string{
			"Retry-After":           "12",
			"X-RateLimit-Limit":     "5",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "60",
			"RateLimit-Policy":      `"orders-write";q=5;w=60`,
			// On a denial the reset is Retry-After's: a client reading
			// r=0 waits t, which must not be longer than it need wait.
			"RateLimit": `"orders-write";r=0;t=12`,
		})
	}
	if n := f.calls.Load(); n != 5 {
		t.Errorf("handler called %d times, want 5", n)
	}
	// Another user has its own budget; the same user on another route too.
	if resp := doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", "bob"); readBody(t, resp) != "ok" || resp.StatusCode != 200 {
		t.Errorf("bob: %d", resp.StatusCode)
	}
	if resp := doHTTP(t, srv, "GET", "/api/search", "X-User-ID", "alice"); readBody(t, resp) != "ok" || resp.StatusCode != 200 {
		t.Errorf("alice search: %d", resp.StatusCode)
	}
	// After Retry-After, one more.
	f.clock.Advance(12 * time.Second)
	if resp := doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", "alice"); readBody(t, resp) != "ok" || resp.StatusCode != 200 {
		t.Errorf("after 12s: %d, want 200", resp.StatusCode)
	}

	snap := f.metrics.Snapshot()
	rs, ok := snap.Rule("orders-write")
	if !ok || rs.Allowed != 7 || rs.Denied != 2 {
		t.Errorf("metrics for orders-write: %+v (found %v), want 7 allowed, 2 denied", rs, ok)
	}
}

func TestCostAgainstLimit(t *testing.T) {
	f := newFixture(t, []sluice.Rule{searchRule}, fixtureOpts{})
	for i, want := range []int{200, 200, 429} {
		w := f.do("GET", "/api/search?q=x", "192.0.2.1:1000", "X-User-ID", "carol")
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, w.Code, want)
		}
		if i == 0 {
			wantHeaders(t, w.Header(), map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "5", "RateLimit-Policy": `"search";q=10;w=60`})
		}
	}
	rs, _ := f.metrics.Snapshot().Rule("search")
	if rs.Allowed != 2 || rs.Denied != 1 {
		t.Errorf("metrics: %+v", rs)
	}
}

func TestCostFunc(t *testing.T) {
	rule := searchRule
	rule.Cost = 0
	f := newFixture(t, []sluice.Rule{rule}, fixtureOpts{config: func(c *Config) {
		c.Cost = func(r *http.Request, cr *sluice.CompiledRule) int64 {
			if r.URL.Query().Get("heavy") != "" {
				return 5
			}
			return 0 // the rule's own
		}
	}})
	if w := f.do("GET", "/api/search", "192.0.2.1:1"); w.Header().Get("X-RateLimit-Remaining") != "9" {
		t.Errorf("light: remaining %q, want 9", w.Header().Get("X-RateLimit-Remaining"))
	}
	if w := f.do("GET", "/api/search?heavy=1", "192.0.2.1:1"); w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("heavy: remaining %q, want 4", w.Header().Get("X-RateLimit-Remaining"))
	}
	if w := f.do("GET", "/api/search?heavy=1", "192.0.2.1:1"); w.Code != 429 {
		t.Errorf("second heavy: %d, want 429", w.Code)
	}
}

func TestCostAboveCapacityIs500(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{config: func(c *Config) {
		c.Cost = func(*http.Request, *sluice.CompiledRule) int64 { return 100 }
	}})
	if w := f.do("POST", "/api/orders", "192.0.2.1:1"); w.Code != 500 || f.calls.Load() != 0 {
		t.Errorf("%d, handler calls %d; want 500 and none", w.Code, f.calls.Load())
	}
	if !strings.Contains(f.logs.String(), "cannot decide") {
		t.Errorf("not logged: %s", f.logs.String())
	}
}

func TestUnmatchedRoutePasses(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{})
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	for _, tc := range []struct{ method, path string }{{"GET", "/healthz"}, {"GET", "/api/orders"}, {"POST", "/api/order"}} {
		resp := doHTTP(t, srv, tc.method, tc.path, "X-User-ID", "alice")
		if body := readBody(t, resp); resp.StatusCode != 200 || body != "ok" {
			t.Errorf("%s %s: %d %q", tc.method, tc.path, resp.StatusCode, body)
		}
		wantNoRateHeaders(t, resp.Header)
	}
	// The default rule covers what no rule does.
	def := sluice.Rule{Name: "catch-all", Scope: sluice.ScopeIP, Algorithm: "sliding_counter", Limit: 100, Window: time.Minute}
	g := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{def: &def})
	if w := g.do("GET", "/healthz", "192.0.2.1:1"); !strings.HasPrefix(w.Header().Get("RateLimit"), `"catch-all";r=99;t=`) {
		t.Errorf("default rule: RateLimit %q", w.Header().Get("RateLimit"))
	}
}

func TestAnonymousFallsBackToIP(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{})
	for range 5 {
		if w := f.do("POST", "/api/orders", "192.0.2.1:1000"); w.Code != 200 {
			t.Fatalf("%d", w.Code)
		}
	}
	if w := f.do("POST", "/api/orders", "192.0.2.1:2000"); w.Code != 429 {
		t.Errorf("same IP, another port: %d, want 429", w.Code)
	}
	if w := f.do("POST", "/api/orders", "192.0.2.2:1000"); w.Code != 200 {
		t.Errorf("another IP: %d, want 200", w.Code)
	}
	d, err := f.eng.Peek(context.Background(), f.reg.Ruleset().Rule("orders-write").Limit(), "ip:192.0.2.1", 1)
	if err != nil || d.Remaining != 0 {
		t.Errorf("ip:192.0.2.1 remaining %d (%v), want 0", d.Remaining, err)
	}
	// A user with an id has its own budget even from that IP.
	if w := f.do("POST", "/api/orders", "192.0.2.1:1000", "X-User-ID", "dave"); w.Code != 200 {
		t.Errorf("identified user from a spent IP: %d, want 200", w.Code)
	}
}

func TestForwardedFor(t *testing.T) {
	ipRule := sluice.Rule{Name: "per-ip", PathPrefix: "/", Scope: sluice.ScopeIP, Algorithm: "fixed_window", Limit: 2, Window: time.Minute}
	opts := fixtureOpts{idCfg: identity.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}

	t.Run("untrusted peer", func(t *testing.T) {
		f := newFixture(t, []sluice.Rule{ipRule}, opts)
		for i, xff := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
			want := 200
			if i == 2 {
				want = 429
			}
			if w := f.do("GET", "/x", "192.0.2.7:5555", "X-Forwarded-For", xff); w.Code != want {
				t.Errorf("spoofed XFF %s: %d, want %d", xff, w.Code, want)
			}
		}
	})
	t.Run("trusted peer", func(t *testing.T) {
		f := newFixture(t, []sluice.Rule{ipRule}, opts)
		for _, xff := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
			if w := f.do("GET", "/x", "10.1.2.3:5555", "X-Forwarded-For", xff); w.Code != 200 {
				t.Errorf("XFF %s through a trusted proxy: %d, want 200", xff, w.Code)
			}
		}
		f.do("GET", "/x", "10.1.2.3:5555", "X-Forwarded-For", "198.51.100.1")
		if w := f.do("GET", "/x", "10.1.2.4:5555", "X-Forwarded-For", "198.51.100.1"); w.Code != 429 {
			t.Errorf("third from 198.51.100.1: %d, want 429", w.Code)
		}
	})
	// The proxy maintains X-Forwarded-For; a Forwarded header beside it is
	// the client's own, and is not read: it can neither move the client
	// onto the proxy's key (shared by whoever lands there) nor buy it a
	// second budget.
	t.Run("client-added Forwarded", func(t *testing.T) {
		f := newFixture(t, []sluice.Rule{ipRule}, opts)
		for i, fwd := range []string{"for=10.1.2.3", "for=198.51.100.9", "for=_hidden"} {
			want := 200
			if i == 2 {
				want = 429
			}
			if w := f.do("GET", "/x", "10.1.2.3:5555", "X-Forwarded-For", "198.51.100.1", "Forwarded", fwd); w.Code != want {
				t.Errorf("XFF 198.51.100.1 with Forwarded %s: %d, want %d", fwd, w.Code, want)
			}
		}
		for _, key := range []string{"ip:10.1.2.3", "ip:198.51.100.9"} {
			if d, err := f.eng.Peek(context.Background(), f.reg.Ruleset().Rule("per-ip").Limit(), key, 2); err != nil || !d.Allowed {
				t.Errorf("%s was spent (%+v, %v): a client-added header moved requests onto it", key, d, err)
			}
		}
	})
	t.Run("ipv6 /64 shares", func(t *testing.T) {
		f := newFixture(t, []sluice.Rule{ipRule}, opts)
		f.do("GET", "/x", "[2001:db8:1:2::1]:1")
		f.do("GET", "/x", "[2001:db8:1:2::2]:1")
		if w := f.do("GET", "/x", "[2001:db8:1:2:ffff::9]:1"); w.Code != 429 {
			t.Errorf("third from the /64: %d, want 429", w.Code)
		}
	})
}

func TestAllModeDenialChargesNothing(t *testing.T) {
	orders := sluice.Rule{Name: "orders", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 10, Window: time.Minute}
	api := sluice.Rule{Name: "api", PathPrefix: "/api", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 2, Window: time.Minute}
	f := newFixture(t, []sluice.Rule{api, orders}, fixtureOpts{mode: sluice.MatchAll})
	srv := httptest.NewServer(f.handler)
	defer srv.Close()

	resp := doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", "erin")
	readBody(t, resp)
	// Allowed: the rule with the least remaining is reported.
	wantHeaders(t, resp.Header, map[string]string{"RateLimit": `"api";r=1;t=30`, "X-RateLimit-Limit": "2"})
	doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", "erin").Body.Close()
	resp = doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", "erin")
	body := readBody(t, resp)
	if resp.StatusCode != 429 || strings.TrimSpace(body) != "rate limit exceeded for rule api" {
		t.Fatalf("third: %d %q, want 429 naming api", resp.StatusCode, body)
	}
	wantHeaders(t, resp.Header, map[string]string{"Retry-After": "30", "RateLimit-Policy": `"api";q=2;w=60`})

	d, err := f.eng.Peek(context.Background(), f.reg.Ruleset().Rule("orders").Limit(), "user:erin", 1)
	// Peek answers as if it spent 1: 7 left after it means 8 left now.
	if err != nil || d.Remaining != 7 {
		t.Errorf("orders remaining %d (%v) after a peek, want 7: the denial by api charged orders", d.Remaining, err)
	}
	snap := f.metrics.Snapshot()
	if o, _ := snap.Rule("orders"); o.Allowed != 2 || o.Denied != 0 {
		t.Errorf("orders metrics %+v", o)
	}
	if a, _ := snap.Rule("api"); a.Allowed != 2 || a.Denied != 1 {
		t.Errorf("api metrics %+v", a)
	}
}

func TestLeakyBucketDelay(t *testing.T) {
	leaky := sluice.Rule{Name: "shaped", PathPrefix: "/shaped", Scope: sluice.ScopeGlobal, Algorithm: "leaky_bucket", Limit: 5, Window: time.Minute}
	var mu sync.Mutex
	var waited []time.Duration
	var order []string
	f := newFixture(t, []sluice.Rule{leaky}, fixtureOpts{config: func(c *Config) {
		c.wait = func(ctx context.Context, d time.Duration) bool {
			mu.Lock()
			defer mu.Unlock()
			waited = append(waited, d)
			order = append(order, "wait")
			return true
		}
	}})
	inner := f.handler
	f.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r)
		mu.Lock()
		order = append(order, "served")
		mu.Unlock()
	})
	for range 3 {
		if w := f.do("GET", "/shaped", "192.0.2.1:1"); w.Code != 200 {
			t.Fatalf("%d", w.Code)
		}
	}
	want := []time.Duration{12 * time.Second, 24 * time.Second} // the first has no delay
	if len(waited) != 2 || waited[0] != want[0] || waited[1] != want[1] {
		t.Errorf("waited %v, want %v", waited, want)
	}
	if got := strings.Join(order, ","); got != "served,wait,served,wait,served" {
		t.Errorf("order %s", got)
	}
	if f.calls.Load() != 3 {
		t.Errorf("calls %d", f.calls.Load())
	}
}

func TestLeakyBucketDelayRealTimer(t *testing.T) {
	// 20 a second: the second request waits 50ms of real time.
	leaky := sluice.Rule{Name: "shaped", PathPrefix: "/", Scope: sluice.ScopeGlobal, Algorithm: "leaky_bucket", Limit: 20, Window: time.Second}
	f := newFixture(t, []sluice.Rule{leaky}, fixtureOpts{})
	f.do("GET", "/", "192.0.2.1:1")
	start := time.Now()
	if w := f.do("GET", "/", "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("%d", w.Code)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("served after %v, want at least 50ms", el)
	}
	if f.calls.Load() != 2 {
		t.Errorf("calls %d", f.calls.Load())
	}
}

func TestLeakyBucketClientGoneStopsWaiting(t *testing.T) {
	leaky := sluice.Rule{Name: "shaped", PathPrefix: "/", Scope: sluice.ScopeGlobal, Algorithm: "leaky_bucket", Limit: 1, Window: time.Hour, Burst: 5}
	waiting := make(chan struct{}, 1)
	f := newFixture(t, []sluice.Rule{leaky}, fixtureOpts{config: func(c *Config) {
		c.wait = func(ctx context.Context, d time.Duration) bool {
			waiting <- struct{}{}
			return sluice.WaitDelay(ctx, d) // an hour, unless the context ends
		}
	}})
	f.do("GET", "/", "192.0.2.1:1")

	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.handler.ServeHTTP(httptest.NewRecorder(), r)
	}()
	select {
	case <-waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never started waiting")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the request still waits after its context ended")
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1 (not for the gone client)", n)
	}
}

func TestLeakyBucketClientGoneOverHTTP(t *testing.T) {
	leaky := sluice.Rule{Name: "shaped", PathPrefix: "/", Scope: sluice.ScopeGlobal, Algorithm: "leaky_bucket", Limit: 1, Window: time.Hour, Burst: 5}
	waiting := make(chan struct{}, 1)
	stopped := make(chan bool, 1)
	f := newFixture(t, []sluice.Rule{leaky}, fixtureOpts{config: func(c *Config) {
		c.wait = func(ctx context.Context, d time.Duration) bool {
			waiting <- struct{}{}
			ok := sluice.WaitDelay(ctx, d)
			stopped <- ok
			return ok
		}
	}})
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	readBody(t, doHTTP(t, srv, "GET", "/"))

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/", nil)
	go func() {
		if resp, err := srv.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-waiting
	cancel() // the client hangs up
	select {
	case ok := <-stopped:
		if ok {
			t.Error("the wait ran out instead of stopping")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server still waits for a client that is gone")
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
}

var errDiskOnFire = errors.New("disk on fire")

// failingMemory is a memory store whose writes fail with errDiskOnFire until
// the returned Faults are cleared.
func failingMemory(t *testing.T) (engineBackend, *faulty.Faults) {
	t.Helper()
	b, f := faulty.Wrap(memory.New(nil))
	if _, err := f.Add(faulty.Rule{Ops: faulty.Writes, Err: errDiskOnFire}); err != nil {
		t.Fatal(err)
	}
	return b, f
}

func TestStoreErrorPolicy(t *testing.T) {
	for _, policy := range []sluice.StoreErrorPolicy{sluice.FailOpen, sluice.FailClosed} {
		t.Run(string(policy), func(t *testing.T) {
			fb, faults := failingMemory(t)
			f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{
				backend: func() (engineBackend, error) { return fb, nil },
				config:  func(c *Config) { c.OnStoreError = policy },
			})
			srv := httptest.NewServer(f.handler)
			defer srv.Close()
			for range 2 {
				resp := doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", "frank")
				body := readBody(t, resp)
				retry := resp.Header.Get("Retry-After")
				resp.Header.Del("Retry-After")
				wantNoRateHeaders(t, resp.Header)
				switch policy {
				case sluice.FailOpen:
					if resp.StatusCode != 200 || body != "ok" || retry != "" {
						t.Errorf("open: %d %q, Retry-After %q; want 200 from the handler, none", resp.StatusCode, body, retry)
					}
				case sluice.FailClosed:
					// A temporary condition: the client is told when to
					// try again (RFC 9110).
					if resp.StatusCode != 503 || retry != "1" {
						t.Errorf("closed: %d, Retry-After %q; want 503 and 1", resp.StatusCode, retry)
					}
				}
			}
			snap := f.metrics.Snapshot()
			rs, _ := snap.Rule("orders-write")
			if policy == sluice.FailOpen {
				if f.calls.Load() != 2 || snap.StoreErrorsOpen != 2 || rs.StoreErrorsOpen != 2 {
					t.Errorf("calls %d, store errors %+v", f.calls.Load(), snap)
				}
			} else if f.calls.Load() != 0 || snap.StoreErrorsClosed != 2 || rs.StoreErrorsClosed != 2 {
				t.Errorf("calls %d, store errors %+v", f.calls.Load(), snap)
			}
			if rs.Allowed+rs.Denied != 0 {
				t.Errorf("a store error counted as a decision: %+v", rs)
			}
			// Logged once, however many errors (at most a line a second).
			if n := strings.Count(f.logs.String(), "rate limit store error"); n != 1 {
				t.Errorf("logged %d times, want 1:\n%s", n, f.logs.String())
			}
			if !strings.Contains(f.logs.String(), "disk on fire") {
				t.Errorf("log lacks the cause:\n%s", f.logs.String())
			}
			// The store heals: limiting resumes.
			faults.Clear()
			resp := doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", "frank")
			readBody(t, resp)
			if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "4" {
				t.Errorf("after healing: %d remaining %q", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
			}
		})
	}
}

func TestClosedEngine(t *testing.T) {
	for _, tc := range []struct {
		policy sluice.StoreErrorPolicy
		code   int
	}{{"", 200}, {sluice.FailClosed, 503}} {
		f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{config: func(c *Config) { c.OnStoreError = tc.policy }})
		f.eng.Close()
		if w := f.do("POST", "/api/orders", "192.0.2.1:1"); w.Code != tc.code {
			t.Errorf("policy %q: %d, want %d", tc.policy, w.Code, tc.code)
		}
	}
}

func TestAllModeStoreError(t *testing.T) {
	fb, _ := failingMemory(t)
	api := sluice.Rule{Name: "api", PathPrefix: "/api", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 2, Window: time.Minute}
	f := newFixture(t, []sluice.Rule{api, ordersRule}, fixtureOpts{
		mode:    sluice.MatchAll,
		backend: func() (engineBackend, error) { return fb, nil },
		config:  func(c *Config) { c.OnStoreError = sluice.FailClosed },
	})
	if w := f.do("POST", "/api/orders", "192.0.2.1:1"); w.Code != 503 {
		t.Errorf("%d, want 503", w.Code)
	}
	if s := f.metrics.Snapshot(); s.StoreErrorsClosed != 1 {
		t.Errorf("store errors %+v, want one", s)
	}
}

func TestIdentityFuncPanicContained(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{identify: func(r *http.Request) (identity.Caller, error) {
		if r.Header.Get("X-Boom") != "" {
			panic("boom")
		}
		return identity.Caller{UserID: r.Header.Get("X-Who")}, nil
	}})
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	resp := doHTTP(t, srv, "POST", "/api/orders", "X-Boom", "1")
	readBody(t, resp)
	if resp.StatusCode != 500 {
		t.Errorf("panicking identity: %d, want 500", resp.StatusCode)
	}
	for range 2 {
		resp = doHTTP(t, srv, "POST", "/api/orders", "X-Who", "gina")
		if body := readBody(t, resp); resp.StatusCode != 200 || body != "ok" {
			t.Errorf("next request: %d %q, want 200", resp.StatusCode, body)
		}
	}
	if !strings.Contains(f.logs.String(), "panicked") || !strings.Contains(f.logs.String(), "boom") {
		t.Errorf("panic not logged:\n%s", f.logs.String())
	}
	if f.calls.Load() != 2 {
		t.Errorf("calls %d, want 2", f.calls.Load())
	}
}

func TestIdentityErrors(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{})
	w := f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", strings.Repeat("a", identity.MaxUserIDLen+1))
	if w.Code != 400 || strings.TrimSpace(w.Body.String()) != "bad caller identity" {
		t.Errorf("too long: %d %q, want 400", w.Code, w.Body.String())
	}
	if w := f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", "a", "X-User-ID", "b"); w.Code != 400 {
		t.Errorf("twice: %d, want 400", w.Code)
	}
	if w := f.do("POST", "/api/orders", "192.0.2.1:1", "X-User-ID", strings.Repeat("a", identity.MaxUserIDLen)); w.Code != 200 {
		t.Errorf("at the bound: %d, want 200", w.Code)
	}
	if f.calls.Load() != 1 {
		t.Errorf("calls %d", f.calls.Load())
	}
	// Nothing charged for the bad ones: the IP's budget is whole.
	d, _ := f.eng.Peek(context.Background(), f.reg.Ruleset().Rule("orders-write").Limit(), "ip:192.0.2.1", 1)
	if d.Remaining != 4 { // after the peek's own 1
		t.Errorf("ip budget remaining %d after a peek, want 4", d.Remaining)
	}
	// No peer address: the server's problem, 500.
	if w := f.do("POST", "/api/orders", "@unix"); w.Code != 500 {
		t.Errorf("no peer: %d, want 500", w.Code)
	}
	// An IdentityFunc error: 400 when it is the client's fault, else 500.
	g := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{identify: func(r *http.Request) (identity.Caller, error) {
		if r.Header.Get("X-Bad") != "" {
			return identity.Caller{}, identity.ErrBadIdentity
		}
		return identity.Caller{}, errors.New("token service down")
	}})
	if w := g.do("POST", "/api/orders", "192.0.2.1:1", "X-Bad", "1"); w.Code != 400 {
		t.Errorf("func bad identity: %d, want 400", w.Code)
	}
	if w := g.do("POST", "/api/orders", "192.0.2.1:1"); w.Code != 500 {
		t.Errorf("func error: %d, want 500", w.Code)
	}
}

func TestRetryAfterNeverZero(t *testing.T) {
	fast := sluice.Rule{Name: "fast", PathPrefix: "/", Scope: sluice.ScopeGlobal, Algorithm: "gcra", Limit: 100, Window: time.Second, Burst: 1}
	f := newFixture(t, []sluice.Rule{fast}, fixtureOpts{})
	f.do("GET", "/", "192.0.2.1:1")
	w := f.do("GET", "/", "192.0.2.1:1")
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("%d Retry-After %q, want 429 and 1 (10ms rounded up)", w.Code, w.Header().Get("Retry-After"))
	}
	// The quota is the capacity (a burst of 1), which comes back whole in
	// 10 ms (rounded up to 1 s); the reset is Retry-After's.
	if got := w.Header().Get("RateLimit-Policy"); got != `"fast";q=1;w=1` {
		t.Errorf("policy %q, want the capacity of 1 per 1 s", got)
	}
	if got := w.Header().Get("RateLimit"); got != `"fast";r=0;t=1` {
		t.Errorf("RateLimit %q, want r=0;t=1", got)
	}
}

func TestRegistrySwapTakesEffect(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{})
	for range 5 {
		f.do("POST", "/api/orders", "192.0.2.1:1")
	}
	raised := ordersRule
	raised.Limit = 10
	if err := f.reg.Replace([]sluice.Rule{raised}, nil, ""); err != nil {
		t.Fatal(err)
	}
	// The spent budget carries over: 5 of the new 10 are left, at once.
	if w := f.do("POST", "/api/orders", "192.0.2.1:1"); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"orders-write";q=10;w=60` ||
		w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("after raising the limit: %d policy %q remaining %q", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("X-RateLimit-Remaining"))
	}
}

func TestNewErrors(t *testing.T) {
	eng, _ := engine.New(memory.New(nil), nil)
	defer eng.Close()
	reg := sluice.NewRegistry(nil)
	id, _ := identity.New(identity.Config{})
	for name, cfg := range map[string]Config{
		"no engine":           {Registry: reg, Identifier: id},
		"no registry":         {Engine: eng, Identifier: id},
		"bad policy":          {Engine: eng, Registry: reg, Identifier: id, OnStoreError: "sometimes"},
		"local without Local": {Engine: eng, Registry: reg, Identifier: id, OnStoreError: sluice.FailLocal},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := New(Config{Engine: eng, Registry: reg, Identifier: id}); err != nil {
		t.Errorf("minimal config: %v", err)
	}
}

// Without an Identifier the middleware keys by the default identity: the
// user header, and the peer's address with no proxy trusted.
func TestNoIdentifierMeansDefaults(t *testing.T) {
	eng, _ := engine.New(memory.New(nil), nil)
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "one", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: "fixed_window", Limit: 1, Window: time.Hour}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := New(Config{Engine: eng, Registry: sluice.NewRegistry(rs)})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for i, c := range []struct {
		remote, user, xff string
		want              int
	}{
		{"192.0.2.1:1", "", "", 200},
		{"192.0.2.1:2", "", "198.51.100.1", 429}, // the forwarding header is not believed
		{"192.0.2.1:3", "alice", "", 200},
		{"192.0.2.2:1", "alice", "", 429},
		{"192.0.2.2:1", "", "", 200},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		if c.user != "" {
			r.Header.Set("X-User-ID", c.user)
		}
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("request %d (%+v): %d, want %d", i, c, w.Code, c.want)
		}
	}
}

func BenchmarkMiddleware(b *testing.B) {
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{
		{Name: "open", PathPrefix: "/open", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 1_000_000_000, Window: time.Millisecond},
		{Name: "shut", PathPrefix: "/shut", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 1, Window: time.Hour},
	}, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	id, _ := identity.New(identity.Config{})
	mw, err := New(Config{Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id, Metrics: metrics.New(nil)})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	for _, bc := range []struct{ name, path string }{{"allowed", "/open"}, {"denied", "/shut"}} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", bc.path, nil)
			r.Header.Set("X-User-ID", "bench")
			h.ServeHTTP(httptest.NewRecorder(), r)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
			}
		})
	}
}
