package httplimit

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// TestReloadKeepsSpent: for every algorithm, a reload that changes a rule's
// limit keeps what each caller spent, over real HTTP. A caller throttled at
// 5 gets exactly the 5 more a raise to 10 allows, at once; a caller who spent
// 7 of 10 is denied after a cut to 5, with nothing remaining and nobody
// above the new capacity. The clock does not move, so nothing refills.
func TestReloadKeepsSpent(t *testing.T) {
	for _, name := range algo.Names {
		t.Run(string(name), func(t *testing.T) {
			rule := func(limit int64) sluice.Rule {
				return sluice.Rule{Name: "orders", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: name, Limit: limit, Window: time.Minute}
			}
			f := newFixture(t, []sluice.Rule{rule(5)}, fixtureOpts{config: func(c *Config) {
				// A leaky bucket's Delay is not waited out: the clock is fake.
				c.wait = func(context.Context, time.Duration) bool { return true }
			}})
			srv := httptest.NewServer(f.handler)
			defer srv.Close()
			reload := func(limit int64) {
				t.Helper()
				rs, err := sluice.NewRuleset([]sluice.Rule{rule(limit)}, nil, "")
				if err != nil {
					t.Fatal(err)
				}
				f.reg.Swap(rs)
			}
			post := func(user string, wantCode int, wantLimit, wantRemaining int64) {
				t.Helper()
				resp := doHTTP(t, srv, "POST", "/api/orders", "X-User-ID", user)
				readBody(t, resp)
				limit, remaining := resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining")
				if resp.StatusCode != wantCode || limit != strconv.FormatInt(wantLimit, 10) || remaining != strconv.FormatInt(wantRemaining, 10) {
					t.Fatalf("POST as %s: %d, X-RateLimit-Limit %s, Remaining %s; want %d, %d, %d",
						user, resp.StatusCode, limit, remaining, wantCode, wantLimit, wantRemaining)
				}
			}

			// Raise: alice spends all 5 and is throttled.
			for i := range int64(5) {
				post("alice", 200, 5, 4-i)
			}
			post("alice", 429, 5, 0)
			reload(10)
			for i := range int64(5) {
				post("alice", 200, 10, 4-i)
			}
			post("alice", 429, 10, 0)

			// Lower: bob spends 7 of 10.
			for i := range int64(7) {
				post("bob", 200, 10, 9-i)
			}
			reload(5)
			post("bob", 429, 5, 0)
			post("bob", 429, 5, 0)
			// A caller who spent nothing has the new capacity, no more.
			post("carol", 200, 5, 4)
		})
	}
}
