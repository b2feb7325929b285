package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/throttled"
)

// BenchmarkMiddlewareModes is BenchmarkMiddleware beyond one rule in
// most_specific mode: two rules together (all mode), an enforced rule with
// a shadow rule beside it, and a rule naming a host.
func BenchmarkMiddlewareModes(b *testing.B) {
	const open, shut = 1_000_000_000, 1
	rule := func(name, prefix string, limit int64, window time.Duration) sluice.Rule {
		return sluice.Rule{Name: name, PathPrefix: prefix, Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: limit, Window: window}
	}
	shadow := func(r sluice.Rule) sluice.Rule { r.Shadow = true; return r }
	host := func(r sluice.Rule) sluice.Rule { r.Host = "api.example.com"; return r }
	for _, bc := range []struct {
		name  string
		mode  sluice.MatchMode
		rules []sluice.Rule
		want  int
		watch bool // a throttled.Tracker watches
	}{
		{"all/allowed", sluice.MatchAll, []sluice.Rule{rule("a", "/x", open, time.Millisecond), rule("b", "/", open, time.Millisecond)}, 204, false},
		{"all/denied", sluice.MatchAll, []sluice.Rule{rule("a", "/x", open, time.Millisecond), rule("b", "/", shut, time.Hour)}, 429, false},
		{"shadow/allowed", sluice.MatchMostSpecific, []sluice.Rule{rule("a", "/x", open, time.Millisecond), shadow(rule("b", "/x", open, time.Millisecond))}, 204, false},
		{"shadow/denied", sluice.MatchMostSpecific, []sluice.Rule{rule("a", "/x", open, time.Millisecond), shadow(rule("b", "/x", shut, time.Hour))}, 204, false},
		{"host/allowed", sluice.MatchMostSpecific, []sluice.Rule{host(rule("a", "/x", open, time.Millisecond)), rule("b", "/", shut, time.Hour)}, 204, false},
		{"one/allowed", sluice.MatchMostSpecific, []sluice.Rule{rule("a", "/x", open, time.Millisecond)}, 204, false},
		{"one/denied", sluice.MatchMostSpecific, []sluice.Rule{rule("a", "/x", shut, time.Hour)}, 429, false},
		{"watch/allowed", sluice.MatchMostSpecific, []sluice.Rule{rule("a", "/x", open, time.Millisecond)}, 204, true},
		{"watch/denied", sluice.MatchMostSpecific, []sluice.Rule{rule("a", "/x", shut, time.Hour)}, 429, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			eng, err := engine.New(memory.New(nil), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			rs, err := sluice.NewRuleset(bc.rules, nil, bc.mode)
			if err != nil {
				b.Fatal(err)
			}
			id, _ := identity.New(identity.Config{})
			cfg := Config{Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id, Metrics: metrics.New(nil)}
			if bc.watch {
				if cfg.Watch, err = throttled.New(nil); err != nil {
					b.Fatal(err)
				}
			}
			mw, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
			r := httptest.NewRequest("GET", "/x", nil)
			r.Host = "api.example.com:8080"
			r.Header.Set("X-User-ID", "bench")
			h.ServeHTTP(httptest.NewRecorder(), r)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != bc.want {
					b.Fatalf("status %d, want %d", w.Code, bc.want)
				}
			}
		})
	}
}
