package envoyrls_test

import (
	"context"
	"strconv"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkShouldRateLimitDescriptors is one request of n descriptors,
// each (tenant, user) of a distinct user, decided as one on the memory
// store: the common few, and many (the work must grow with n, not n²).
func BenchmarkShouldRateLimitDescriptors(b *testing.B) {
	for _, n := range []int{3, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			f := newFixture(b, manyOptions(n), benchConfig)
			req := &rlspb.RateLimitRequest{Domain: "bench"}
			for i := range n {
				req.Descriptors = append(req.Descriptors, desc("tenant", "t", "user", strconv.Itoa(i)))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := f.srv.ShouldRateLimit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
