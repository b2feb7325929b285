package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
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
		Limiter:           lim,
		Key:               func(r *http.Request) (string, error) { return "key:" + r.Header.Get("X-API-Key"), nil },
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

	for _, rows := range []string{"4", "4", "4"} {
		req := httptest.NewRequest("GET", "/export?rows="+rows, nil)
		req.Header.Set("X-API-Key", "k-1")
		rec := httptest.NewRecorder()
		export.ServeHTTP(rec, req)
		fmt.Printf("%d %q Retry-After=%s RateLimit-Policy=%s\n", rec.Code, rec.Body.String(),
			rec.Header().Get("Retry-After"), rec.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "exported; 6 rows left" Retry-After= RateLimit-Policy="export";q=10;w=60
	// 200 "exported; 2 rows left" Retry-After= RateLimit-Policy="export";q=10;w=60
	// 429 "rate limit exceeded for rule export\n" Retry-After=12 RateLimit-Policy="export";q=10;w=60
}
