package httplimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
)

// phT0 is the start of the PerHandler tests' timelines: a whole minute.
var phT0 = time.Unix(1_700_000_040, 0)

// reply is what a test reads of a response.
type reply struct {
	status int
	body   string
	header http.Header
}

// get sends a GET for path to srv over loopback, with the given headers.
func get(t *testing.T, srv *httptest.Server, path string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, string(body), resp.Header}
}

// decisionHandler writes what DecisionFrom finds in its request's context.
var decisionHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	d, ok := httplimit.DecisionFrom(r.Context())
	if !ok {
		io.WriteString(w, "no decision")
		return
	}
	fmt.Fprintf(w, "%s allowed=%v remaining=%d reset=%v", d.Rule.Name(), d.Allowed, d.Remaining, d.Reset)
})

// perHandlerServer serves h behind PerHandler(cfg) over loopback, with the
// limiter on a fake clock at phT0 unless cfg has one.
func perHandlerServer(t *testing.T, cfg httplimit.PerHandlerConfig, h http.Handler) (*httptest.Server, *engine.FakeClock) {
	t.Helper()
	clock := engine.NewFakeClock(phT0)
	if cfg.Limiter == nil {
		lim, err := sluice.NewLimiter(2, time.Minute, sluice.WithClock(clock), sluice.WithName("api"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		cfg.Limiter = lim
	}
	mw, err := httplimit.PerHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv, clock
}

// byUser keys a request by its X-User header.
func byUser(r *http.Request) (string, error) {
	u := r.Header.Get("X-User")
	if u == "" {
		return "", fmt.Errorf("no user: %w", identity.ErrBadIdentity)
	}
	return "user:" + u, nil
}

func TestPerHandler(t *testing.T) {
	srv, clock := perHandlerServer(t, httplimit.PerHandlerConfig{Key: byUser, DecisionInContext: true}, decisionHandler)
	for i, s := range []struct {
		advance   time.Duration
		user      string
		status    int
		body      string
		remaining string
		retry     string
		rateLimit string
	}{
		{0, "a", 200, "api allowed=true remaining=1 reset=30s", "1", "", `"api";r=1;t=30`},
		{0, "a", 200, "api allowed=true remaining=0 reset=1m0s", "0", "", `"api";r=0;t=60`},
		{0, "a", 429, "rate limit exceeded for rule api\n", "0", "30", `"api";r=0;t=30`},
		{0, "b", 200, "api allowed=true remaining=1 reset=30s", "1", "", `"api";r=1;t=30`},
		{30 * time.Second, "a", 200, "api allowed=true remaining=0 reset=1m0s", "0", "", `"api";r=0;t=60`},
		{0, "", 400, "bad caller identity\n", "", "", ""},
	} {
		clock.Advance(s.advance)
		got := get(t, srv, "/", "X-User", s.user)
		if got.status != s.status || got.body != s.body {
			t.Errorf("step %d: %d %q, want %d %q", i, got.status, got.body, s.status, s.body)
		}
		for _, h := range []struct{ name, want string }{
			{"X-Ratelimit-Remaining", s.remaining},
			{"Retry-After", s.retry},
			{"Ratelimit", s.rateLimit},
		} {
			if v := got.header.Get(h.name); v != h.want {
				t.Errorf("step %d: %s = %q, want %q", i, h.name, v, h.want)
			}
		}
		if s.remaining != "" {
			if v, want := got.header.Get("Ratelimit-Policy"), `"api";q=2;w=60`; v != want {
				t.Errorf("step %d: RateLimit-Policy = %q, want %q", i, v, want)
			}
			if v := got.header.Get("X-Ratelimit-Limit"); v != "2" {
				t.Errorf("step %d: X-RateLimit-Limit = %q, want 2", i, v)
			}
		}
	}
}

// The default key is the client's IP address: every request of the test
// comes from 127.0.0.1.
func TestPerHandlerDefaultKey(t *testing.T) {
	srv, _ := perHandlerServer(t, httplimit.PerHandlerConfig{}, decisionHandler)
	for i, want := range []int{200, 200, 429} {
		if got := get(t, srv, "/", "X-User", strconv.Itoa(i)); got.status != want {
			t.Errorf("request %d: %d, want %d (keyed by IP, not by header)", i, got.status, want)
		}
	}
}

func TestPerHandlerCost(t *testing.T) {
	var errs []error
	cfg := httplimit.PerHandlerConfig{
		Key:               byUser,
		DecisionInContext: true,
		Cost: func(r *http.Request) (int64, error) {
			return strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		},
		OnError: func(w http.ResponseWriter, r *http.Request, err error) {
			errs = append(errs, err)
			http.Error(w, "nope", http.StatusTeapot)
		},
	}
	srv, _ := perHandlerServer(t, cfg, decisionHandler)
	for i, s := range []struct {
		path   string
		status int
		body   string
	}{
		{"/?n=2", 200, "api allowed=true remaining=0 reset=1m0s"},
		{"/?n=1", 429, "rate limit exceeded for rule api\n"},
		{"/?n=x", 418, "nope\n"},
		{"/?n=3", 418, "nope\n"}, // above the capacity: never allowed
	} {
		if got := get(t, srv, s.path, "X-User", "a"); got.status != s.status || got.body != s.body {
			t.Errorf("step %d: GET %s: %d %q, want %d %q", i, s.path, got.status, got.body, s.status, s.body)
		}
	}
	if len(errs) != 2 || !errors.Is(errs[0], strconv.ErrSyntax) {
		t.Errorf("OnError got %v, want the parse error and the capacity's", errs)
	}
}

// OnDenied answers a denial, with the headers set and the decision in the
// request's context, DecisionInContext unset.
func TestPerHandlerOnDenied(t *testing.T) {
	cfg := httplimit.PerHandlerConfig{
		Key: byUser,
		OnDenied: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, _ := httplimit.DecisionFrom(r.Context())
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "retry in %v; Retry-After %s", d.RetryAfter, w.Header().Get("Retry-After"))
		}),
	}
	srv, _ := perHandlerServer(t, cfg, decisionHandler)
	get(t, srv, "/", "X-User", "a")
	get(t, srv, "/", "X-User", "a")
	if got := get(t, srv, "/", "X-User", "a"); got.status != 503 || got.body != "retry in 30s; Retry-After 30" {
		t.Errorf("denied: %d %q", got.status, got.body)
	}
}

// A store that fails lets the request through by default, without
// headers or a decision, and is answered 503 under FailClosed.
func TestPerHandlerStoreError(t *testing.T) {
	for _, c := range []struct {
		policy sluice.StoreErrorPolicy
		status int
		body   string
	}{
		{"", 200, "no decision"},
		{sluice.FailOpen, 200, "no decision"},
		{sluice.FailClosed, 503, "rate limiter unavailable\n"},
	} {
		t.Run(string(c.policy), func(t *testing.T) {
			lim, err := sluice.NewLimiter(2, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			lim.Close() // every call now fails with engine.ErrClosed
			var logs bytes.Buffer
			cfg := httplimit.PerHandlerConfig{Limiter: lim, Key: byUser, OnStoreError: c.policy, DecisionInContext: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			srv, _ := perHandlerServer(t, cfg, decisionHandler)
			got := get(t, srv, "/", "X-User", "a")
			if got.status != c.status || got.body != c.body || got.header.Get("X-Ratelimit-Limit") != "" {
				t.Errorf("%d %q with X-RateLimit-Limit %q, want %d %q and none", got.status, got.body, got.header.Get("X-Ratelimit-Limit"), c.status, c.body)
			}
		})
	}
	if _, err := httplimit.PerHandler(httplimit.PerHandlerConfig{Limiter: nil}); err == nil {
		t.Error("PerHandler without a Limiter succeeded")
	}
	lim, _ := sluice.NewLimiter(1, time.Second)
	defer lim.Close()
	if _, err := httplimit.PerHandler(httplimit.PerHandlerConfig{Limiter: lim, OnStoreError: sluice.FailLocal}); err == nil {
		t.Error("PerHandler under FailLocal succeeded")
	}
}

// New's middleware and PerHandler send the same fields for the same limit,
// and both give the handler the decision.
func TestPerHandlerFieldsMatchNew(t *testing.T) {
	clock := engine.NewFakeClock(phT0)
	eng, err := engine.New(memory.New(nil), &engine.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "orders", PathPrefix: "/orders", Scope: sluice.ScopeIP, Algorithm: "token_bucket", Limit: 5, Window: time.Minute}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := httplimit.New(httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), DecisionInContext: true})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := sluice.NewLimiter(5, time.Minute, sluice.WithName("orders"), sluice.WithClock(clock)) // its own store: the two do not share a budget
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	per, err := httplimit.PerHandler(httplimit.PerHandlerConfig{Limiter: lim, DecisionInContext: true})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/orders", rules(decisionHandler))
	mux.Handle("/other", rules(decisionHandler)) // no rule covers it
	mux.Handle("/per", per(decisionHandler))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	a, b := get(t, srv, "/orders"), get(t, srv, "/per")
	for _, name := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit"} {
		if a.header.Get(name) == "" || a.header.Get(name) != b.header.Get(name) {
			t.Errorf("%s: New sent %q, PerHandler %q", name, a.header.Get(name), b.header.Get(name))
		}
	}
	if want := "orders allowed=true remaining=4 reset=12s"; a.body != want || b.body != want {
		t.Errorf("handlers read %q (New) and %q (PerHandler), want %q", a.body, b.body, want)
	}
	if got := get(t, srv, "/other"); got.body != "no decision" {
		t.Errorf("a request no rule covers: %q, want no decision", got.body)
	}
}

// A key the client chooses (here a header) longer than identity.MaxKeyLen
// is refused with 400 and spends nothing: the store never holds it.
func TestPerHandlerRefusesLongKeys(t *testing.T) {
	srv, _ := perHandlerServer(t, httplimit.PerHandlerConfig{Key: byUser}, decisionHandler)
	long := strings.Repeat("x", identity.MaxKeyLen) // "user:" makes it 5 bytes over
	for i := range 3 {
		if got := get(t, srv, "/", "X-User", long); got.status != 400 || got.body != "bad caller identity\n" {
			t.Fatalf("request %d with a %d-byte key: %d %q, want 400", i, len(long)+5, got.status, got.body)
		}
	}
	fits := long[:identity.MaxKeyLen-len("user:")]
	for i, want := range []int{200, 200, 429} {
		if got := get(t, srv, "/", "X-User", fits); got.status != want {
			t.Errorf("request %d with a key of MaxKeyLen bytes: %d, want %d", i, got.status, want)
		}
	}
}

// TestNewLeavesTheContextByDefault: without Config.DecisionInContext the
// rules middleware hands its handler the request it was given (no copy),
// so DecisionFrom finds nothing, while the headers carry the decision.
func TestNewLeavesTheContextByDefault(t *testing.T) {
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "api", PathPrefix: "/", Scope: sluice.ScopeIP, Algorithm: "gcra", Limit: 5, Window: time.Minute}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs)})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	var seen *http.Request
	var found bool
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r
		_, found = httplimit.DecisionFrom(r.Context())
	})).ServeHTTP(rec, req)
	if seen != req || found {
		t.Errorf("the handler got a copy of the request (%v) or a decision in its context (%v)", seen != req, found)
	}
	if rec.Header().Get("RateLimit") == "" {
		t.Error("no RateLimit header")
	}
}

// TestPerHandlerLeavesTheContextByDefault: without DecisionInContext
// PerHandler hands its handler the request it was given (no copy, fewer
// allocations), so DecisionFrom finds nothing while the headers carry the
// decision; with it, the handler finds the decision the headers report.
func TestPerHandlerLeavesTheContextByDefault(t *testing.T) {
	allocs := map[bool]float64{}
	for _, inCtx := range []bool{false, true} {
		lim, err := sluice.NewLimiter(1_000_000, time.Minute, sluice.WithName("api"), sluice.WithClock(engine.NewFakeClock(phT0)))
		if err != nil {
			t.Fatal(err)
		}
		defer lim.Close()
		mw, err := httplimit.PerHandler(httplimit.PerHandlerConfig{Limiter: lim, Key: byUser, DecisionInContext: inCtx})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-User", "a")
		var seen *http.Request
		var d httplimit.Decision
		var found bool
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen = r
			d, found = httplimit.DecisionFrom(r.Context())
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if copied := seen != req; copied != inCtx || found != inCtx {
			t.Errorf("DecisionInContext %v: the handler got a copy of the request (%v), a decision in its context (%v)", inCtx, copied, found)
		}
		if got := rec.Header().Get("X-Ratelimit-Remaining"); got != "999999" {
			t.Errorf("DecisionInContext %v: X-RateLimit-Remaining %q, want 999999", inCtx, got)
		}
		if inCtx && (d.Rule.Name() != "api" || !d.Allowed || d.Remaining != 999_999) {
			t.Errorf("the handler found %s allowed=%v remaining=%d, want api true 999999", d.Rule.Name(), d.Allowed, d.Remaining)
		}
		hdr := rec.Header()
		allocs[inCtx] = testing.AllocsPerRun(100, func() {
			clear(hdr)
			h.ServeHTTP(rec, req)
		})
	}
	t.Logf("allocations a request: %v without DecisionInContext, %v with", allocs[false], allocs[true])
	if allocs[false] >= allocs[true] {
		t.Errorf("allocations a request: %v without DecisionInContext, %v with: want fewer without", allocs[false], allocs[true])
	}
}

// With Actual, Cost is an estimate settled once the handler has returned,
// on a frozen clock: a request using less than its estimate is refunded
// the rest, one using more is charged it even past the limit (and the
// next is refused until the debt has refilled), and one whose handler
// reports nothing keeps its estimate.
func TestPerHandlerActual(t *testing.T) {
	clock := engine.NewFakeClock(phT0)
	lim, err := sluice.NewLimiter(10, time.Minute, sluice.WithClock(clock), sluice.WithName("tokens"), sluice.WithAlgorithm(algo.FixedWindowName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	cfg := httplimit.PerHandlerConfig{
		Limiter: lim,
		Key:     byUser,
		Cost:    func(r *http.Request) (int64, error) { return strconv.ParseInt(r.URL.Query().Get("n"), 10, 64) },
		Actual: func(_ *http.Request, h http.Header) (int64, bool) {
			n, err := strconv.ParseInt(h.Get("X-Used"), 10, 64)
			return n, err == nil
		},
	}
	srv, _ := perHandlerServer(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.URL.Query().Get("used"); u != "" {
			w.Header().Set("X-Used", u)
		}
		io.WriteString(w, "ok")
	}))
	for i, s := range []struct {
		path      string
		status    int
		remaining string // as decided on the estimate
	}{
		{"/?n=6&used=2", 200, "4"},  // refunded 4: 2 spent
		{"/?n=1&used=1", 200, "7"},  // 3 spent
		{"/?n=3", 200, "4"},         // nothing reported: the estimate stands, 6 spent
		{"/?n=2&used=9", 200, "2"},  // charged 7 beyond: 15 spent, 5 in debt
		{"/?n=1", 429, "0"},         // in debt
		{"/?n=20&used=0", 429, "0"}, // an estimate above the capacity is the capacity, refused in debt
	} {
		got := get(t, srv, s.path, "X-User", "a")
		if got.status != s.status || got.header.Get("X-Ratelimit-Remaining") != s.remaining {
			t.Errorf("step %d: GET %s: %d remaining %q, want %d remaining %q", i, s.path, got.status, got.header.Get("X-Ratelimit-Remaining"), s.status, s.remaining)
		}
	}
	// The debt stands: 15 spent of 10 in the window.
	if d, err := lim.Engine().Peek(context.Background(), lim.Rule().Limit(), "user:a", 1); err != nil || d.Allowed {
		t.Errorf("after the debt: %+v (%v), want still denied", d, err)
	}
}
