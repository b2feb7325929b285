package bench

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkMiddleware measures one request through each HTTP rate-limiting
// middleware wrapping a trivial handler, with no network: a prebuilt request
// from one client IP and a reused DiscardWriter. allowed runs at a limit no
// run can spend; denied at a limit of one an hour, spent before the timer
// starts. floor is the bare handler, so a middleware's overhead is its
// ns/op minus floor's.
func BenchmarkMiddleware(b *testing.B) {
	paths := []struct {
		name   string
		rate   Rate
		status int
	}{
		{"allowed", Unlimited, http.StatusOK},
		{"denied", Exhausted, http.StatusTooManyRequests},
	}
	for _, impl := range Middlewares {
		b.Run(impl, func(b *testing.B) {
			for _, p := range paths {
				b.Run(p.name, func(b *testing.B) {
					h, closeFn, err := NewMiddleware(impl, p.rate, OKHandler)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(closeFn)
					req := httptest.NewRequest(http.MethodGet, "/", nil)
					req.RemoteAddr = "203.0.113.7:1234"
					w := NewDiscardWriter()
					// Spend the budget (denied) and check the answer.
					want := p.status
					if impl == MiddlewareFloor {
						want = http.StatusOK
					}
					for range 2 {
						w.Reset()
						h.ServeHTTP(w, req)
					}
					if w.Status != want {
						b.Fatalf("status %d, want %d", w.Status, want)
					}
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						w.Reset()
						h.ServeHTTP(w, req)
					}
					b.StopTimer()
					if w.Status != want {
						b.Fatalf("status %d, want %d", w.Status, want)
					}
				})
			}
		})
	}
}
