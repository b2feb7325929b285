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
)

// A customer asks how much it has left: the usage handler, over the
// middleware's own Config, answers for the request's own caller, as the
// middleware identifies it, and spends nothing. (The fake clock keeps the
// output fixed.)
func ExampleNewUsage() {
	eng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_040, 0))})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{
		Name: "orders", Method: "POST", PathPrefix: "/api/orders",
		Scope: sluice.ScopeUser, Algorithm: "fixed_window", Limit: 100, Window: time.Hour,
	}}, nil, sluice.MatchMostSpecific)
	if err != nil {
		panic(err)
	}
	cfg := httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs)}
	limit, err := httplimit.New(cfg)
	if err != nil {
		panic(err)
	}
	usage, err := httplimit.NewUsage(cfg)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /api/orders", limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	mux.Handle("GET /v1/usage", usage)

	ask := func(method, target string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, nil)
		r.Header.Set("X-User-ID", "alice")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	for range 3 {
		ask("POST", "/api/orders")
	}
	w := ask("GET", "/v1/usage")
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	fmt.Print(w.Body.String())
	w = ask("GET", "/v1/usage?user=bob")
	fmt.Print(w.Code, " ", w.Body.String())
	// Output:
	// 200 application/json
	// {
	//   "at": "2023-11-14T22:14:00Z",
	//   "limits": [
	//     {
	//       "rule": "orders",
	//       "method": "POST",
	//       "path_prefix": "/api/orders",
	//       "scope": "user",
	//       "shadow": false,
	//       "key": "user:alice",
	//       "override": false,
	//       "exempt": false,
	//       "algorithm": "fixed_window",
	//       "limit": 100,
	//       "window_seconds": 3600,
	//       "cost": 1,
	//       "remaining": 97,
	//       "allowed": true,
	//       "retry_after_seconds": 0,
	//       "reset_seconds": 2760,
	//       "reset_at": "2023-11-14T23:00:00Z"
	//     }
	//   ]
	// }
	// 400 {"error":"user: this endpoint answers for the caller's own identity only, never for a named caller"}
}
