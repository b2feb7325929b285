package sluice_test

import (
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// Every spelling of a path is matched as its canonical form, so a rule on
// /api/orders covers each of them; HEAD is covered by a GET rule.
func ExampleCanonicalPath() {
	for _, p := range []string{"//api/orders", "/api//orders", "/api/./orders", "/api/x/../orders", "/..", ""} {
		fmt.Printf("%q → %q\n", p, sluice.CanonicalPath(p))
	}
	rs, err := sluice.NewRulesetWith([]sluice.Rule{{
		Name: "orders", Method: "GET", PathPrefix: "/api/orders",
		Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 5, Window: time.Minute,
	}}, nil, sluice.RulesetOptions{PathCase: sluice.PathCaseInsensitive})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(rs.AppendMatch(nil, sluice.RequestShape{Method: "HEAD", Path: "//API/x/../Orders/1"})))
	// Output:
	// "//api/orders" → "/api/orders"
	// "/api//orders" → "/api/orders"
	// "/api/./orders" → "/api/orders"
	// "/api/x/../orders" → "/api/orders"
	// "/.." → "/"
	// "" → "/"
	// 1
}
