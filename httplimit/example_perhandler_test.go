package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
)

// Ten rows a minute per API key in front of one handler, an export of n
// rows spending n, and the handler telling the caller what is left.
func ExamplePerHandler() {
	lim, err := sluice.NewLimiter(10, time.Minute, sluice.WithName("export"))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	limit, err := httplimit.PerHandler(httplimit.PerHandlerConfig{
		Limiter: lim,
		Key: func(r *http.Request) (string, error) {
			k := r.Header.Get("X-API-Key")
			if k == "" { // not one shared budget for every request without a key
				return "", fmt.Errorf("%w: no X-API-Key", identity.ErrBadIdentity) // 400
			}
			return "key:" + k, nil
		},
		DecisionInContext: true, // for DecisionFrom
		Cost: func(r *http.Request) (int64, error) {
			return strconv.ParseInt(r.URL.Query().Get("rows"), 10, 64)
		},
	})
	if err != nil {
		panic(err)
	}
	export := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := httplimit.DecisionFrom(r.Context())
		fmt.Fprintf(w, "exported; %d rows left", d.Remaining)
	}))

	for _, c := range []struct{ key, rows string }{{"k-1", "4"}, {"k-1", "4"}, {"k-1", "4"}, {"", "1"}} {
		req := httptest.NewRequest("GET", "/export?rows="+c.rows, nil)
		if c.key != "" {
			req.Header.Set("X-API-Key", c.key)
		}
		rec := httptest.NewRecorder()
		export.ServeHTTP(rec, req)
		fmt.Printf("%d %q Retry-After=%s RateLimit-Policy=%s\n", rec.Code, rec.Body.String(),
			rec.Header().Get("Retry-After"), rec.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "exported; 6 rows left" Retry-After= RateLimit-Policy="export";q=10;w=60
	// 200 "exported; 2 rows left" Retry-After= RateLimit-Policy="export";q=10;w=60
	// 429 "rate limit exceeded for rule export\n" Retry-After=12 RateLimit-Policy="export";q=10;w=60
	// 400 "bad caller identity\n" Retry-After= RateLimit-Policy=
}
