package httplimit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
)

// usageFixture returns the middleware's fixture over rules and a Usage of
// the same Config.
func usageFixture(t *testing.T, rules []sluice.Rule) (*fixture, *Usage) {
	t.Helper()
	var cfg Config
	f := newFixture(t, rules, fixtureOpts{config: func(c *Config) { cfg = *c }})
	u, err := NewUsage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, u
}

// askUsage sends GET target to u from remote with headers, and decodes a
// 200's body.
func askUsage(t *testing.T, u http.Handler, target, remote string, headers ...string) (int, UsageBody, string) {
	t.Helper()
	r := httptest.NewRequest("GET", target, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	u.ServeHTTP(w, r)
	var body UsageBody
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("GET %s: %v in %s", target, err, w.Body)
		}
	}
	return w.Code, body, w.Body.String()
}

// The caller's own usage: what the middleware will decide next, under the
// rules a request would meet or every rule of the caller, for the caller
// the request says it is, nothing spent.
func TestUsageOwnCaller(t *testing.T) {
	f, u := usageFixture(t, []sluice.Rule{ordersRule, searchRule})
	const remote = "192.0.2.7:4000"
	for range 2 {
		if w := f.do("POST", "/api/orders", remote, "X-User-ID", "alice"); w.Code != http.StatusOK {
			t.Fatalf("order: %d", w.Code)
		}
	}
	code, body, raw := askUsage(t, u, "/usage", remote, "X-User-ID", "alice")
	if code != http.StatusOK || len(body.Limits) != 2 {
		t.Fatalf("GET /usage: %d %s, want both rules", code, raw)
	}
	byRule := map[string]LimitBody{}
	for _, l := range body.Limits {
		byRule[l.Rule] = l
	}
	if o := byRule["orders-write"]; o.Key != "user:alice" || o.Remaining != 3 || o.Limit != 5 || !o.Allowed || o.WindowSeconds != 60 || o.Method != "POST" || o.PathPrefix != "/api/orders" || o.Scope != "user" {
		t.Errorf("orders-write: %+v, want user:alice with 3 of 5 left", o)
	}
	if s := byRule["search"]; s.Remaining != 10 || s.Cost != 5 || s.ResetSeconds != 0 {
		t.Errorf("search: %+v, want 10 left, cost 5, full", s)
	}
	// The next order sees what usage said.
	w := f.do("POST", "/api/orders", remote, "X-User-ID", "alice")
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "2" {
		t.Errorf("the next order left %s, want 2 (usage said 3 before it)", got)
	}
	// A request's rules only.
	code, body, raw = askUsage(t, u, "/usage?method=GET&path="+url.QueryEscape("/api/search/x"), remote, "X-User-ID", "alice")
	if code != http.StatusOK || len(body.Limits) != 1 || body.Limits[0].Rule != "search" {
		t.Errorf("GET /api/search/x: %d %s, want the search rule alone", code, raw)
	}
	// Another caller, seen by no rule: full, and no record written.
	before := f.eng.Len()
	code, body, _ = askUsage(t, u, "/usage", remote, "X-User-ID", "carol")
	if code != http.StatusOK || body.Limits[0].Remaining != 5 || body.Limits[0].Key != "user:carol" {
		t.Errorf("carol: %d %+v", code, body)
	}
	if f.eng.Len() != before {
		t.Errorf("reading carol's usage wrote records: %d, then %d", before, f.eng.Len())
	}
}

// The handler answers for the request's own caller only: a query naming a
// caller, an unknown parameter, a bad method or path, another method, are
// refused, and say why; hostile values are quoted clipped.
func TestUsageRefuses(t *testing.T) {
	_, u := usageFixture(t, []sluice.Rule{ordersRule})
	const remote = "192.0.2.7:4000"
	long := strings.Repeat("x", 100_000)
	for _, tt := range []struct {
		target, want string
	}{
		{"/usage?user=bob", "own identity only"},
		{"/usage?api_key=k", "own identity only"},
		{"/usage?ip=192.0.2.9", "own identity only"},
		{"/usage?plan=gold", "own identity only"},
		{"/usage?keyhash=ab", "own identity only"},
		{"/usage?bogus=1", "unknown parameter"},
		{"/usage?" + long + "=1", "unknown parameter"},
		{"/usage?method=GET", "method needs a path"},
		{"/usage?path=relative", "absolute path"},
		{"/usage?path=/" + long, "absolute path"},
		{"/usage?path=/x&method=" + url.QueryEscape("G T"), "HTTP method"},
	} {
		code, _, raw := askUsage(t, u, tt.target, remote, "X-User-ID", "alice")
		if code != http.StatusBadRequest || !strings.Contains(raw, tt.want) {
			t.Errorf("GET %.60s: %d %.200s, want 400 saying %q", tt.target, code, raw, tt.want)
		}
		if len(raw) > 1000 {
			t.Errorf("GET %.60s: a %d-byte answer", tt.target, len(raw))
		}
	}
	// A bad identity is the caller's mistake.
	if code, _, raw := askUsage(t, u, "/usage", remote, "X-User-ID", strings.Repeat("u", 1000)); code != http.StatusBadRequest {
		t.Errorf("a user id over the bound: %d %s, want 400", code, raw)
	}
	w := httptest.NewRecorder()
	u.ServeHTTP(w, httptest.NewRequest("POST", "/usage", nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d Allow %q, want 405 GET, HEAD", w.Code, w.Header().Get("Allow"))
	}
}
