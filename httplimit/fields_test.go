package httplimit

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// policyFields are the parameters of one RateLimit-Policy and one
// RateLimit item, read with an independent RFC 9651 parser.
type policyFields struct {
	name       string
	q, w, r, t int64
}

// parseFields parses the IETF draft fields of h as Lists of one Item each
// (draft-ietf-httpapi-ratelimit-headers: a String naming the policy, with
// Integer parameters), failing t on anything else.
func parseFields(t *testing.T, policy, limit string) policyFields {
	t.Helper()
	var f policyFields
	pl, err := httpsfv.UnmarshalList([]string{policy})
	if err != nil || len(pl) != 1 {
		t.Fatalf("RateLimit-Policy %q: %v (%d members), want a List of one Item", policy, err, len(pl))
	}
	rl, err := httpsfv.UnmarshalList([]string{limit})
	if err != nil || len(rl) != 1 {
		t.Fatalf("RateLimit %q: %v (%d members), want a List of one Item", limit, err, len(rl))
	}
	pi, ok1 := pl[0].(httpsfv.Item)
	ri, ok2 := rl[0].(httpsfv.Item)
	if !ok1 || !ok2 {
		t.Fatalf("fields %q, %q: want Items, not Inner Lists", policy, limit)
	}
	name, ok := pi.Value.(string)
	if rname, rok := ri.Value.(string); !ok || !rok || name != rname {
		t.Fatalf("fields %q, %q: want the same String naming the policy in both", policy, limit)
	}
	f.name = name
	param := func(p *httpsfv.Params, key, field string) int64 {
		v, ok := p.Get(key)
		n, isInt := v.(int64)
		if !ok || !isInt || n < 0 {
			t.Fatalf("%s: parameter %s = %v, want a non-negative Integer", field, key, v)
		}
		return n
	}
	f.q, f.w = param(pi.Params, "q", "RateLimit-Policy"), param(pi.Params, "w", "RateLimit-Policy")
	f.r, f.t = param(ri.Params, "r", "RateLimit"), param(ri.Params, "t", "RateLimit")
	return f
}

// Every rate-limit field of every algorithm agrees with the others, on an
// allowed answer and on a 429, as docs/serve.md's table says: the quota q
// is the capacity (X-RateLimit-Limit), r (X-RateLimit-Remaining) never
// above it, t on an allowed answer never past the policy's window w, and on
// a 429 t is Retry-After (which for the sliding counter may be past w: its
// current count still weighs in the next window); X-RateLimit-Reset is
// never past w but for the sliding counter's; the fields parse as the
// draft's structured fields.
//
// The leaky bucket is the one that holds an admitted request for its
// Delay: the middleware's wait here moves the engine's clock just past the
// Delay for the requests the test marks held, as the real wait lets real
// time pass, and returns at once for the others (a request held while the
// next arrives), so that its queue both fills to a 429 and drains.
func TestFieldsAgree(t *testing.T) {
	for _, name := range algo.Names {
		for _, burst := range []int64{0, 5} {
			// A burst is the buckets'.
			if burst > 0 && !(name == algo.TokenBucketName || name == algo.LeakyBucketName || name == algo.GCRAName) {
				continue
			}
			rule := sluice.Rule{Name: "r", PathPrefix: "/", Scope: sluice.ScopeGlobal, Algorithm: name, Limit: 2, Window: 2 * time.Second, Burst: burst}
			t.Run(fmt.Sprintf("%s burst %d", name, burst), func(t *testing.T) {
				var f *fixture
				hold, held, waits := false, 0, 0
				f = newFixture(t, []sluice.Rule{rule}, fixtureOpts{config: func(c *Config) {
					c.wait = func(_ context.Context, d time.Duration) bool {
						waits++
						if hold {
							f.clock.Advance(d + time.Millisecond)
							held++
						}
						return true
					}
				}})
				capacity := max(burst, 2)
				denied, allowedAfterDenial := 0, 0
				// capacity+1 requests at once, the last denied; one a while
				// into the window; then, a window later, four more, each
				// admitted one held past its Delay.
				for i := range int(capacity) + 6 {
					switch i {
					case int(capacity) + 1:
						f.clock.Advance(1300 * time.Millisecond)
					case int(capacity) + 2:
						f.clock.Advance(rule.Window)
						hold = true
					}
					w := f.do("GET", "/", "192.0.2.1:1")
					h := w.Header()
					fields := parseFields(t, h.Get("RateLimit-Policy"), h.Get("RateLimit"))
					limit, _ := strconv.ParseInt(h.Get("X-RateLimit-Limit"), 10, 64)
					remaining, err1 := strconv.ParseInt(h.Get("X-RateLimit-Remaining"), 10, 64)
					reset, err2 := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
					call := fmt.Sprintf("request %d (%d): %v", i+1, w.Code, h)
					switch {
					case err1 != nil || err2 != nil:
						t.Errorf("%s: X-RateLimit-Remaining or -Reset not an integer", call)
					case fields.name != "r":
						t.Errorf("%s: the policy is named %q", call, fields.name)
					case fields.q != capacity || limit != capacity:
						t.Errorf("%s: q %d, X-RateLimit-Limit %d; want the capacity %d", call, fields.q, limit, capacity)
					case fields.r > fields.q || fields.r != remaining:
						t.Errorf("%s: r %d against q %d and X-RateLimit-Remaining %d", call, fields.r, fields.q, remaining)
					case w.Code != 429 && fields.t > fields.w:
						t.Errorf("%s: t %d past the window w %d", call, fields.t, fields.w)
					case w.Code != 429 && fields.t > reset:
						t.Errorf("%s: t %d past X-RateLimit-Reset %d", call, fields.t, reset)
					case reset < 0 || name != algo.SlidingCounterName && reset > fields.w:
						t.Errorf("%s: X-RateLimit-Reset %d against the window w %d", call, reset, fields.w)
					case w.Code != 429 && w.Code != 200:
						t.Errorf("%s: want 200 or 429", call)
					}
					if w.Code != 429 {
						if denied > 0 {
							allowedAfterDenial++
						}
						continue
					}
					denied++
					retry, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
					if err != nil || retry < 1 || retry != fields.t {
						t.Errorf("%s: Retry-After %q against t %d: want the same whole seconds, at least 1", call, h.Get("Retry-After"), fields.t)
					}
					if retry > reset {
						t.Errorf("%s: Retry-After %d past X-RateLimit-Reset %d, when the whole capacity is back", call, retry, reset)
					}
				}
				if denied == 0 {
					t.Fatalf("no request was denied: the 429 exchange was not checked")
				}
				if allowedAfterDenial == 0 {
					t.Errorf("no request was allowed after a denial: the refilled answers were not checked")
				}
				if name == algo.LeakyBucketName && (held == 0 || waits == held) {
					t.Errorf("%d of %d waits moved the clock: want some requests held past their Delay, some not", held, waits)
				}
			})
		}
	}
}
