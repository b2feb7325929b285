package envoyrls_test

import (
	"context"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
)

const benchConfig = `domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 1000000000}
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 1000000000}
`

// BenchmarkShouldRateLimit is the service's decision path without gRPC:
// one request of two descriptors, (tenant, user) and (tenant), decided as
// one on the memory store, over 1000 users.
func BenchmarkShouldRateLimit(b *testing.B) {
	f := newFixture(b, envoyrls.Options{}, benchConfig)
	reqs := make([]*rlspb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
			desc("tenant", "t", "user", strconv.Itoa(i)), desc("tenant", "t"),
		}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.srv.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMatch is one descriptor's match: the limit, its key and label.
func BenchmarkMatch(b *testing.B) {
	d, err := rlsfile.ParseFile("b.yaml", []byte(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	c, _ := envoyrls.NewConfig(d)
	es := desc("tenant", "t", "user", "12345").Entries
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if c.Match("bench", es).Limit == nil {
			b.Fatal("no match")
		}
	}
}
