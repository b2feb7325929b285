package bench

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"go.uber.org/ratelimit"
)

// TestWorkloadRates checks, in a few calls each, that every implementation
// answers as its workload assumes: Unlimited and Refilling allow, Exhausted
// allows the first call and denies the next, Typical allows its ten and
// denies the eleventh. A peer wired to the wrong rate, or not limiting at
// all, fails here before any benchmark measures it.
func TestWorkloadRates(t *testing.T) {
	typical := make([]bool, Typical.Limit+2)
	for i := range Typical.Limit {
		typical[i] = true
	}
	for _, tc := range []struct {
		rate Rate
		want []bool
	}{
		{Unlimited, []bool{true, true, true}},
		{Refilling, []bool{true, true, true}},
		{Exhausted, []bool{true, false, false}},
		{Typical, typical},
	} {
		for _, im := range impls(workload{rate: tc.rate, fakeClock: true, floor: tc.rate != Exhausted && tc.rate != Typical, variants: true}) {
			l, err := im.new()
			if err != nil {
				t.Fatalf("%s at %+v: %v", im.name, tc.rate, err)
			}
			// A variant deciding prepared keys is called as the
			// workloads call it.
			allow := l.Allow
			if p, ok := l.(KeyPreparer); ok && p.Prepared() {
				allow = func(key string) (bool, error) { k := p.Prepare(key); return p.AllowKey(&k) }
			}
			for i, want := range tc.want {
				got, err := allow("user-000000000000042")
				if err != nil || got != want {
					t.Errorf("%s at %+v: call %d: Allow = %v, %v; want %v, nil", im.name, tc.rate, i, got, err, want)
				}
			}
			// Another key has its own budget.
			if got, err := allow("user-000000000000043"); err != nil || !got {
				t.Errorf("%s at %+v: a second key's first call: Allow = %v, %v; want true, nil", im.name, tc.rate, got, err)
			}
			l.Close()
		}
	}
}

// TestUberRateLimitLimits checks that go.uber.org/ratelimit, which never
// denies, does limit by making Take wait: without slack, eleven calls at
// 100 a second take at least 100 ms; and that at the HotKey rate of a
// billion a second it does not wait.
func TestUberRateLimitLimits(t *testing.T) {
	u, err := NewUberRateLimit(100, ratelimit.WithoutSlack)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 11 {
		if ok, err := u.Allow("any"); !ok || err != nil {
			t.Fatalf("Allow = %v, %v; want true, nil", ok, err)
		}
	}
	if d := time.Since(start); d < 95*time.Millisecond {
		t.Errorf("11 calls at 100/s took %v; want at least 100ms", d)
	}

	fast, err := NewUberRateLimit(1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	for range 100_000 {
		fast.Allow("any")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("100,000 calls at a billion a second took %v; Take must not sleep", d)
	}
	if _, err := NewUberRateLimit(0); err == nil {
		t.Error("NewUberRateLimit(0) returned no error")
	}
}

// TestHTTPRateMatchesMiddleware checks that the HTTPRate adapter decides
// as httprate's own RateLimiter.OnLimit does, request by request, over
// three keys at three a minute.
func TestHTTPRateMatchesMiddleware(t *testing.T) {
	h, err := NewHTTPRate(Rate{Limit: 3, Window: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rl := httprate.NewRateLimiter(3, time.Minute)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	for i, key := range []string{"a", "a", "b", "a", "a", "c", "b", "a", "b", "b", "c"} {
		got, err := h.Allow(key)
		if err != nil {
			t.Fatal(err)
		}
		want := !rl.OnLimit(httptest.NewRecorder(), req, key)
		if got != want {
			t.Errorf("request %d for %q: adapter allowed %v, httprate %v", i, key, got, want)
		}
	}
	for _, r := range []Rate{{Limit: 0, Window: time.Second}, {Limit: 1, Window: 0}, {Limit: 1 << 40, Window: time.Second}} {
		if _, err := NewHTTPRate(r, nil); err == nil {
			t.Errorf("NewHTTPRate(%+v) returned no error", r)
		}
	}
}
