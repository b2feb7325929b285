package envoyrls_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsmetrics"
)

// seriesOf counts the series the metrics export.
func seriesOf(t *testing.T, m *envoyrls.Metrics) int {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(rlsmetrics.NewCollector(m))
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

const detailed = `domain: api
descriptors:
  - key: user
    detailed_metric: true
    rate_limit:
      unit: day
      requests_per_unit: 5
`

// No label takes a value a client chooses without bound: unknown domains
// are one counter, a request's own limit is counted under "override", and
// the series detailed_metric builds from request values stop at
// MaxSeries, the rest counted under the limit's own label.
func TestMetricsLabelsBounded(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, messaging, detailed)
	base := seriesOf(t, f.metrics)
	for i := range 1000 {
		f.ask(t, fmt.Sprint("nope-", i), 0, desc("to_number", "1"))
	}
	if got := seriesOf(t, f.metrics); got != base {
		t.Errorf("1,000 unknown domains: %d series, want %d as before", got, base)
	}
	if u := f.metrics.Counts().UnknownDomain; u != 1000 {
		t.Errorf("unknown_domain_total = %v, want 1000", u)
	}

	for i := range 300 {
		d := desc("to_number", fmt.Sprint(i))
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(i + 1), Unit: 3}
		f.ask(t, "messaging", 0, d)
	}
	if hits, _, _, _, _ := f.metrics.Snapshot("messaging", envoyrls.OverrideMetric); hits != 300 {
		t.Errorf("300 requests bringing their own limits: %d hits under %q", hits, envoyrls.OverrideMetric)
	}
	withOverrides := seriesOf(t, f.metrics)
	if withOverrides > base+5 {
		t.Errorf("300 requests bringing their own limits added %d series, want the one override series", withOverrides-base)
	}

	for i := range envoyrls.MaxSeries + 500 {
		f.ask(t, "api", 0, desc("user", fmt.Sprint("u", i)))
	}
	// MaxSeries, and the limit's own label, from the configuration.
	c := f.metrics.Counts()
	if n := len(c.Series) + len(c.Requests); n > envoyrls.MaxSeries+1 {
		t.Errorf("%d series after %d users under detailed_metric, want at most %d", n, envoyrls.MaxSeries+500, envoyrls.MaxSeries+1)
	}
	if hits, _, _, _, _ := f.metrics.Snapshot("api", "user"); hits < 500 {
		t.Errorf("the users past MaxSeries: %d hits under the limit's own label, want at least 500", hits)
	}
}

// NearLimitRatio sets the near-limit metric's threshold as
// envoyproxy/ratelimit's NEAR_LIMIT_RATIO does (its
// checkNearLimitThreshold): allowed hits past floor(limit × ratio), a
// request's hits counted only as far as they go past it; 0 is the default
// 0.8, and a share outside (0, 1] is refused.
func TestMetricsNearLimitRatio(t *testing.T) {
	const ten = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 10}\n"
	for _, c := range []struct {
		ratio      float64
		hits       []uint32 // one request each
		near, over uint64
	}{
		{0, []uint32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 2, 0},    // 0.8: hits 9 and 10
		{0.5, []uint32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 5, 0},  // hits 6 to 10
		{0.5, []uint32{7, 3}, 5, 0},                          // 2 of the 7, all 3
		{0.25, []uint32{2, 2, 1}, 3, 0},                      // threshold 2: 2 of the second, 1
		{1, []uint32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 1}, // never near, one over
		{0.95, []uint32{10}, 1, 0},                           // floor(9.5) is 9
	} {
		f := newFixture(t, envoyrls.Options{NearLimitRatio: c.ratio}, ten)
		v := fmt.Sprint(c.ratio, c.hits)
		for _, h := range c.hits {
			f.ask(t, "d", h, desc("k", v))
		}
		if _, over, near, _, _ := f.metrics.Snapshot("d", "k"); near != c.near || over != c.over {
			t.Errorf("ratio %v, hits %v: near %d over %d, want near %d over %d", c.ratio, c.hits, near, over, c.near, c.over)
		}
	}
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	for _, r := range []float64{-0.1, 1.5, math.NaN(), math.Inf(1)} {
		if _, err := envoyrls.NewServer(nil, envoyrls.Options{Engine: eng, NearLimitRatio: r}); err == nil || !strings.Contains(err.Error(), "NearLimitRatio") {
			t.Errorf("NearLimitRatio %v: %v, want it refused", r, err)
		}
	}
}
