package envoyrls_test

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/envoyrls"
)

// Under any sequence of requests, each of a few descriptors over a shared
// tenant limit and per-user limits, with any costs: a request answered OK
// spent its cost on every limited descriptor, one answered OVER_LIMIT spent
// nothing, so each limit's spending is exactly the sum of the costs of the
// OK requests that carried it, and never more than its limit.
func TestPropertyAllOrNothing(tt *testing.T) {
	rapid.Check(tt, func(t *rapid.T) {
		f := newFixture(tt, envoyrls.Options{}, `domain: p
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 20}
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 7}
  - key: plan
    value: trial
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 3}
`)
		spentTenant := int64(0)
		spentUser := map[string]int64{}
		users := []string{"a", "b", "c"}
		n := rapid.IntRange(1, 60).Draw(t, "requests")
		for i := 0; i < n; i++ {
			u := rapid.SampledFrom(users).Draw(t, "user")
			cost := rapid.Int64Range(0, 9).Draw(t, "cost")
			withTenant := rapid.Bool().Draw(t, "tenant")
			withShadow := rapid.Bool().Draw(t, "shadow")
			user := desc("tenant", "x", "user", u)
			ds := []*rlv3.RateLimitDescriptor{user}
			if withTenant {
				ds = append(ds, desc("tenant", "x"))
			}
			if withShadow {
				ds = append(ds, desc("plan", "trial"))
			}
			for _, d := range ds {
				d.HitsAddend = wrapperspb.UInt64(uint64(cost))
			}
			resp, err := f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "p", Descriptors: ds})
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode == rlspb.RateLimitResponse_OK {
				spentUser[u] += cost
				if withTenant {
					spentTenant += cost
				}
			}
			// Checking with hits 0 spends nothing and reports what is left.
			check := func(d *rlv3.RateLimitDescriptor) uint32 {
				d.HitsAddend = wrapperspb.UInt64(0)
				r, err := f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "p", Descriptors: []*rlv3.RateLimitDescriptor{d}})
				if err != nil {
					t.Fatal(err)
				}
				return r.Statuses[0].LimitRemaining
			}
			if got, want := int64(check(desc("tenant", "x"))), 20-spentTenant; got != want {
				t.Fatalf("request %d: the tenant has %d left, want %d", i, got, want)
			}
			if got, want := int64(check(desc("tenant", "x", "user", u))), 7-spentUser[u]; got != want {
				t.Fatalf("request %d: user %s has %d left, want %d", i, u, got, want)
			}
		}
	})
}
