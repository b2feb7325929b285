package httplimit

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/metrics"
)

// redisServer is the middleware over an engine on a real redis-server,
// with the local policy, behind a real HTTP listener.
type redisServer struct {
	redis   *redistest.Server
	srv     *httptest.Server
	metrics *metrics.Metrics
	logs    *syncBuffer
}

// newRedisServer starts a redis-server and serves rules over it in mode,
// with on_store_error local over a fleet of fleet.
func newRedisServer(t *testing.T, rules []sluice.Rule, mode sluice.MatchMode, fleet int) *redisServer {
	t.Helper()
	rs := &redisServer{redis: redistest.Start(t), metrics: metrics.New(nil), logs: &syncBuffer{}}
	store, err := redis.Open(redis.ClientOptions{Addrs: []string{rs.redis.Addr}}, &redis.Options{
		KeyPrefix: "httplimit:" + strings.ReplaceAll(t.Name(), "/", ":") + ":",
		// A race-detector build on a loaded machine can take longer than
		// the default 50ms to schedule a reply: a slow call must not pass
		// for Redis being down.
		Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(store, nil)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	localEng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { localEng.Close() })
	local, err := sluice.NewLocalFallback(localEng, fleet)
	if err != nil {
		t.Fatal(err)
	}
	ruleset, err := sluice.NewRuleset(rules, nil, mode)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(identity.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := New(Config{
		Engine: eng, Registry: sluice.NewRegistry(ruleset), Identifier: id, Metrics: rs.metrics,
		OnStoreError: sluice.FailLocal, Local: local,
		Logger: slog.New(slog.NewTextHandler(rs.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rs.srv = httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })))
	t.Cleanup(rs.srv.Close)
	return rs
}

// sendAs sends n requests as user and returns their statuses and the last
// response's headers.
func (rs *redisServer) sendAs(t *testing.T, n int, method, path, user string) ([]int, http.Header) {
	t.Helper()
	var codes []int
	var h http.Header
	for range n {
		resp := doHTTP(t, rs.srv, method, path, "X-User-ID", user)
		readBody(t, resp)
		codes = append(codes, resp.StatusCode)
		h = resp.Header
	}
	return codes, h
}

// waitForRedis sends requests as a throwaway user until one is decided by
// Redis again (the limit header is the rule's, not its share's), within a
// generous ceiling: the store's breaker lets a probe through every
// cooldown.
func (rs *redisServer) waitForRedis(t *testing.T, path, limit string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		_, h := rs.sendAs(t, 1, "POST", path, fmt.Sprintf("probe-%d", i))
		if h.Get("X-RateLimit-Limit") == limit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision by Redis 20s after it started again (X-RateLimit-Limit %q); logs:\n%s", h.Get("X-RateLimit-Limit"), rs.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With on_store_error local, a gateway whose Redis is stopped keeps
// limiting on the rule's share (ceil(10/3) = 4), counts it, and goes back
// to the shared budget once Redis is back.
func TestLocalPolicyOverRedis(t *testing.T) {
	// A long token bucket: nothing refills during the test, and no window
	// boundary can fall inside it.
	rule := sluice.Rule{Name: "orders", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 10, Window: 24 * time.Hour}
	rs := newRedisServer(t, []sluice.Rule{rule}, "", 3)

	codes, h := rs.sendAs(t, 3, "POST", "/api/orders", "ann")
	if fmt.Sprint(codes) != "[200 200 200]" || h.Get("X-RateLimit-Limit") != "10" || h.Get("X-RateLimit-Remaining") != "7" {
		t.Fatalf("ann on Redis: %v, limit %q remaining %q; want 3×200, 10, 7", codes, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"))
	}
	if s, _ := rs.metrics.Snapshot().Rule("orders"); s.LocalAllowed+s.LocalDenied+s.StoreErrorsLocal != 0 {
		t.Fatalf("local decisions or store errors while Redis is up: %+v", s)
	}

	rs.redis.Stop()
	codes, h = rs.sendAs(t, 6, "POST", "/api/orders", "bob")
	if fmt.Sprint(codes) != "[200 200 200 200 429 429]" {
		t.Errorf("bob with Redis down: %v, want the share: 4×200 then 429s", codes)
	}
	if h.Get("X-RateLimit-Limit") != "4" || h.Get("Retry-After") == "" || h.Get("RateLimit-Policy") != `"orders";q=4;w=86400` {
		t.Errorf("a local denial's headers: limit %q, Retry-After %q, policy %q; want the share's 4 and a Retry-After",
			h.Get("X-RateLimit-Limit"), h.Get("Retry-After"), h.Get("RateLimit-Policy"))
	}
	s, _ := rs.metrics.Snapshot().Rule("orders")
	if s.LocalAllowed != 4 || s.LocalDenied != 2 || s.StoreErrorsLocal != 6 || s.Allowed != 7 || s.Denied != 2 {
		t.Errorf("counters with Redis down: %+v; want 4 allowed and 2 denied locally (counted as decisions too), 6 store errors under local", s)
	}
	if !strings.Contains(rs.logs.String(), "policy=local") {
		t.Errorf("the store error is not logged with its policy:\n%s", rs.logs)
	}

	if err := rs.redis.Start(); err != nil {
		t.Fatal(err)
	}
	rs.waitForRedis(t, "/api/orders", "10")
	codes, h = rs.sendAs(t, 11, "POST", "/api/orders", "cy")
	if fmt.Sprint(codes[:10]) != "[200 200 200 200 200 200 200 200 200 200]" || codes[10] != 429 || h.Get("X-RateLimit-Limit") != "10" {
		t.Errorf("cy once Redis is back: %v (limit %q), want the whole 10 then 429", codes, h.Get("X-RateLimit-Limit"))
	}
}

// In all mode the local decision is all-or-nothing over every rule's
// share, as on the store.
func TestLocalPolicyAllMode(t *testing.T) {
	user := sluice.Rule{Name: "user", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 6, Window: 24 * time.Hour}
	global := sluice.Rule{Name: "global", PathPrefix: "/api", Scope: sluice.ScopeGlobal, Algorithm: "sliding_log", Limit: 8, Window: 24 * time.Hour}
	rs := newRedisServer(t, []sluice.Rule{user, global}, sluice.MatchAll, 2)
	rs.redis.Stop()
	// Shares: user 3, global 4. ann spends 3 of each; bob gets the global
	// share's last one, then the global share denies him, and the denial
	// charges his user share nothing.
	a, _ := rs.sendAs(t, 4, "POST", "/api/orders", "ann")
	b, h := rs.sendAs(t, 3, "POST", "/api/orders", "bob")
	if fmt.Sprint(a, b) != "[200 200 200 429] [200 429 429]" {
		t.Errorf("ann %v, bob %v; want [200 200 200 429] [200 429 429]", a, b)
	}
	if !strings.Contains(h.Get("RateLimit-Policy"), `"global";q=4`) {
		t.Errorf("bob's denial reports %q, want the global share", h.Get("RateLimit-Policy"))
	}
	snap := rs.metrics.Snapshot()
	u, _ := snap.Rule("user")
	g, _ := snap.Rule("global")
	if u.LocalAllowed != 4 || g.LocalAllowed != 4 || u.LocalDenied != 1 || g.LocalDenied != 2 || snap.StoreErrorsLocal != 7 {
		t.Errorf("user %+v, global %+v, store errors %d", u, g, snap.StoreErrorsLocal)
	}
}
