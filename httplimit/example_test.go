package httplimit_test

import (
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

// Five orders a minute per user, in front of a net/http mux. (The fake
// clock keeps the output fixed; a real program leaves Options.Clock nil.)
func ExampleNew() {
	eng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_040, 0))})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{
		Name: "orders-write", Method: "POST", PathPrefix: "/api/orders",
		Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 5, Window: time.Minute,
	}}, nil, sluice.MatchMostSpecific)
	if err != nil {
		panic(err)
	}
	// The default identity: the user id in X-User-ID, an anonymous caller
	// counted by the connection's address, no proxy trusted.
	id, err := identity.New(identity.Config{})
	if err != nil {
		panic(err)
	}
	limit, err := httplimit.New(httplimit.Config{
		Engine:       eng,
		Registry:     sluice.NewRegistry(rs),
		Identifier:   id,
		OnStoreError: sluice.FailOpen,
	})
	if err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/orders", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "order placed")
	})
	h := limit(mux)

	for i := 1; i <= 6; i++ {
		r := httptest.NewRequest("POST", "/api/orders", nil)
		r.Header.Set("X-User-ID", "alice")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d: %d RateLimit: %s", i, w.Code, w.Header().Get("RateLimit"))
		if w.Code == http.StatusTooManyRequests {
			fmt.Printf(" Retry-After: %s — %s", w.Header().Get("Retry-After"), w.Body.String())
		} else {
			fmt.Println()
		}
	}
	// Output:
	// 1: 200 RateLimit: "orders-write";r=4;t=12
	// 2: 200 RateLimit: "orders-write";r=3;t=24
	// 3: 200 RateLimit: "orders-write";r=2;t=36
	// 4: 200 RateLimit: "orders-write";r=1;t=48
	// 5: 200 RateLimit: "orders-write";r=0;t=60
	// 6: 429 RateLimit: "orders-write";r=0;t=12 Retry-After: 12 — rate limit exceeded for rule orders-write
}
