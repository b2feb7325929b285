package httplimit

import (
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
// allowed answer and on a 429, as README's table says: the quota q is the
// capacity (X-RateLimit-Limit), r (X-RateLimit-Remaining) never above it,
// t on an allowed answer never past the policy's window w, and on a 429 t
// is Retry-After (which for the sliding counter may be past w: its
// current count still weighs in the next window); the fields parse as the
// draft's structured fields.
func TestFieldsAgree(t *testing.T) {
	for _, name := range algo.Names {
		for _, burst := range []int64{0, 5} {
			// A burst is the buckets'. The leaky bucket's admissions wait
			// their Delay, on the engine's clock, which drains it: its
			// fields are algo.Quota's and algo.QuotaReset's, tested there.
			if name == algo.LeakyBucketName || burst > 0 && !(name == algo.TokenBucketName || name == algo.GCRAName) {
				continue
			}
			rule := sluice.Rule{Name: "r", PathPrefix: "/", Scope: sluice.ScopeGlobal, Algorithm: name, Limit: 2, Window: 2 * time.Second, Burst: burst}
			t.Run(fmt.Sprintf("%s burst %d", name, burst), func(t *testing.T) {
				f := newFixture(t, []sluice.Rule{rule}, fixtureOpts{})
				capacity := max(burst, 2)
				denied := 0
				for i := range int(capacity) + 3 {
					if i == int(capacity)+1 {
						f.clock.Advance(1300 * time.Millisecond) // a while into the window
					}
					w := f.do("GET", "/", "192.0.2.1:1")
					h := w.Header()
					fields := parseFields(t, h.Get("RateLimit-Policy"), h.Get("RateLimit"))
					limit, _ := strconv.ParseInt(h.Get("X-RateLimit-Limit"), 10, 64)
					remaining, _ := strconv.ParseInt(h.Get("X-RateLimit-Remaining"), 10, 64)
					reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
					call := fmt.Sprintf("request %d (%d): %v", i+1, w.Code, h)
					switch {
					case fields.name != "r":
						t.Errorf("%s: the policy is named %q", call, fields.name)
					case fields.q != capacity || limit != capacity:
						t.Errorf("%s: q %d, X-RateLimit-Limit %d; want the capacity %d", call, fields.q, limit, capacity)
					case fields.r > fields.q || fields.r != remaining:
						t.Errorf("%s: r %d against q %d and X-RateLimit-Remaining %d", call, fields.r, fields.q, remaining)
					case w.Code != 429 && fields.t > fields.w:
						t.Errorf("%s: t %d past the window w %d", call, fields.t, fields.w)
					case reset < 0:
						t.Errorf("%s: X-RateLimit-Reset %d", call, reset)
					}
					if w.Code != 429 {
						continue
					}
					denied++
					retry, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
					if err != nil || retry < 1 || retry != fields.t {
						t.Errorf("%s: Retry-After %q against t %d: want the same whole seconds, at least 1", call, h.Get("Retry-After"), fields.t)
					}
				}
				if denied == 0 {
					t.Fatalf("no request was denied: the 429 exchange was not checked")
				}
			})
		}
	}
}
