package xds_test

import (
	"testing"

	confv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice/envoyrls/xds"
)

// Any RateLimitConfig a control plane can send is read or refused with an
// error, never a panic, and a read one keeps its domain.
func FuzzDecodeConfig(f *testing.F) {
	for _, rc := range []*confv3.RateLimitConfig{
		perDay("api", "api", 3),
		{Domain: "d", Descriptors: []*confv3.RateLimitDescriptor{{Key: "k", Value: "a*b", RateLimit: &confv3.RateLimitPolicy{Unlimited: true}}}},
		{Domain: "d", Descriptors: []*confv3.RateLimitDescriptor{{Key: "k", Descriptors: []*confv3.RateLimitDescriptor{{Key: "j", RateLimit: &confv3.RateLimitPolicy{Unit: confv3.RateLimitUnit_WEEK, RequestsPerUnit: 1, Replaces: []*confv3.RateLimitReplace{{Name: "x"}}}}}}}},
	} {
		b, err := proto.Marshal(rc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var rc confv3.RateLimitConfig
		if proto.Unmarshal(b, &rc) != nil {
			return
		}
		d, err := xds.DecodeConfig(&rc)
		if err == nil && d.Name != rc.GetDomain() {
			t.Fatalf("domain %q read as %q", rc.GetDomain(), d.Name)
		}
	})
}
