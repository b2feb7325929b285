package envoyrls_test

import (
	"fmt"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
