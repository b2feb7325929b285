package rlsmetrics

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
)

// The collector exports every count of the Metrics as its series, named
// and labelled as the README lists them.
func TestCollector(t *testing.T) {
	rpu := uint32(2)
	d, err := envoyrls.NewDomain("go", "api", []envoyrls.Descriptor{
		{Key: "user", RateLimit: &envoyrls.RateLimit{Unit: "day", RequestsPerUnit: &rpu}},
		{Key: "plan", ShadowMode: true, RateLimit: &envoyrls.RateLimit{Unit: "day", RequestsPerUnit: &rpu}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := envoyrls.NewConfig(d)
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	m := envoyrls.NewMetrics()
	srv, err := envoyrls.NewServer(cfg, envoyrls.Options{Engine: eng, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(domain, key string) {
		t.Helper()
		_, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: "x"}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		ask("api", "user")
		ask("api", "plan")
	}
	ask("elsewhere", "user")
	want := `
# HELP sluice_rls_hits_total Hits (the sum of hits_addend) of the descriptors matching each limit.
# TYPE sluice_rls_hits_total counter
sluice_rls_hits_total{descriptor="plan",domain="api"} 3
sluice_rls_hits_total{descriptor="user",domain="api"} 3
# HELP sluice_rls_near_limit_total Allowed hits past 80% of the limit.
# TYPE sluice_rls_near_limit_total counter
sluice_rls_near_limit_total{descriptor="plan",domain="api"} 1
sluice_rls_near_limit_total{descriptor="user",domain="api"} 1
# HELP sluice_rls_over_limit_total Hits over the limit, shadow_mode limits' included; none of them was spent.
# TYPE sluice_rls_over_limit_total counter
sluice_rls_over_limit_total{descriptor="plan",domain="api"} 1
sluice_rls_over_limit_total{descriptor="user",domain="api"} 1
# HELP sluice_rls_requests_total ShouldRateLimit requests answered, by domain and overall code.
# TYPE sluice_rls_requests_total counter
sluice_rls_requests_total{code="ok",domain="api"} 5
sluice_rls_requests_total{code="over_limit",domain="api"} 1
# HELP sluice_rls_settled_units_total Units the calls made on stream done charged beyond the estimates (kind=charged) or took back of them (kind=refunded).
# TYPE sluice_rls_settled_units_total counter
sluice_rls_settled_units_total{kind="charged"} 0
sluice_rls_settled_units_total{kind="refunded"} 0
# HELP sluice_rls_shadow_mode_total Hits a shadow_mode limit was over and answered OK.
# TYPE sluice_rls_shadow_mode_total counter
sluice_rls_shadow_mode_total{descriptor="plan",domain="api"} 1
sluice_rls_shadow_mode_total{descriptor="user",domain="api"} 0
# HELP sluice_rls_store_errors_total ShouldRateLimit requests the store failed (answered UNAVAILABLE).
# TYPE sluice_rls_store_errors_total counter
sluice_rls_store_errors_total 0
# HELP sluice_rls_unknown_domain_total ShouldRateLimit requests naming a domain no file configures (answered OK).
# TYPE sluice_rls_unknown_domain_total counter
sluice_rls_unknown_domain_total 1
# HELP sluice_rls_within_limit_total Allowed hits.
# TYPE sluice_rls_within_limit_total counter
sluice_rls_within_limit_total{descriptor="plan",domain="api"} 2
sluice_rls_within_limit_total{descriptor="user",domain="api"} 2
`
	if err := testutil.CollectAndCompare(NewCollector(m), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
