package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
)

// claims are what an authenticating middleware verified of a request's
// token.
type claims struct{ sub, org string }

type claimsKey struct{}

// An organisation's pool of 3 requests a minute shared by its users, each
// of whom has 2 of it: two rules of one group, decided together, the
// organisation an attribute of the caller that the identity function
// returns from verified claims. A user at their limit spends nothing of
// the organisation's. The fields report the level with the least left,
// or the one that denies.
func Example_hierarchy() {
	eng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_040, 0))})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{
		{Name: "org-minute", Group: "org", PathPrefix: "/v1/", Scope: sluice.ScopeAttr("org"), Algorithm: "fixed_window", Limit: 3, Window: time.Minute},
		{Name: "user-minute", Group: "org", PathPrefix: "/v1/", Scope: sluice.ScopeUser, Algorithm: "fixed_window", Limit: 2, Window: time.Minute},
	}, nil, sluice.MatchMostSpecific)
	if err != nil {
		panic(err)
	}
	id, err := identity.New(identity.Config{})
	if err != nil {
		panic(err)
	}
	limit, err := httplimit.New(httplimit.Config{
		Engine:     eng,
		Registry:   sluice.NewRegistry(rs),
		Identifier: id,
		Identity: func(r *http.Request) (identity.Caller, error) {
			c, _ := r.Context().Value(claimsKey{}).(claims)
			return identity.Caller{UserID: c.sub}.With("org", c.org), nil
		},
	})
	if err != nil {
		panic(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, c := range []claims{{"alice", "acme"}, {"alice", "acme"}, {"alice", "acme"}, {"bob", "acme"}, {"bob", "acme"}, {"carol", "globex"}} {
		r := httptest.NewRequest("GET", "/v1/orders", nil)
		r = r.WithContext(context.WithValue(r.Context(), claimsKey{}, c))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s of %s: %d %s\n", c.sub, c.org, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// alice of acme: 200 "user-minute";q=2;w=60
	// alice of acme: 200 "user-minute";q=2;w=60
	// alice of acme: 429 "user-minute";q=2;w=60
	// bob of acme: 200 "org-minute";q=3;w=60
	// bob of acme: 429 "org-minute";q=3;w=60
	// carol of globex: 200 "user-minute";q=2;w=60
}
