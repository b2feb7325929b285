package envoyrls

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// NearLimitRatio is the share of a limit past which allowed hits count as
// near the limit, as envoyproxy/ratelimit's default NEAR_LIMIT_RATIO.
const NearLimitRatio = 0.8

// Metrics counts what a Server decides, per domain and descriptor (the
// metric label of Match), in hits (a request of hits_addend 3 is 3 hits), as
// envoyproxy/ratelimit's statistics do:
//
//	sluice_rls_hits_total{domain,descriptor}          every hit of a matched limit
//	sluice_rls_over_limit_total{domain,descriptor}    hits over the limit (shadow_mode ones included)
//	sluice_rls_near_limit_total{domain,descriptor}    allowed hits past NearLimitRatio of the limit
//	sluice_rls_within_limit_total{domain,descriptor}  allowed hits
//	sluice_rls_shadow_mode_total{domain,descriptor}   hits a shadow_mode limit would have denied
//	sluice_rls_requests_total{domain,code}            requests answered, by overall code (ok, over_limit)
//	sluice_rls_unknown_domain_total                   requests naming a domain not configured
//	sluice_rls_store_errors_total                     requests the store failed (answered UNAVAILABLE)
//
// No label takes a value a client chooses but through the configuration:
// a domain no file configures is counted in unknown_domain_total alone, a
// descriptor that carries its own limit is counted under "override", and
// the series that detailed_metric and value_to_metric build from request
// values are at most MaxSeries in all; past that, a new one is counted
// under its limit's own label (its path without values).
//
// The Observe path takes no lock. Series live until the Metrics is
// dropped, so a counter never goes backwards across reloads. Safe for
// concurrent use.
type Metrics struct {
	series sync.Map     // seriesKey → *counters
	count  atomic.Int64 // series in the map

	unknownDomain, storeErrors atomic.Uint64
}

// MaxSeries bounds the series built from request values
// (detailed_metric, value_to_metric).
const MaxSeries = 10000

// overrideMetric is the descriptor label of every limit a request brings
// itself.
const overrideMetric = "override"

type seriesKey struct{ domain, descriptor string }

// counters are one series' counts, and its domain's request counts.
type counters struct {
	domain, descriptor               string
	hits, over, near, within, shadow atomic.Uint64
	requestsOK, requestsOver         atomic.Uint64 // used in the series of descriptor ""
}

// NewMetrics returns empty Metrics.
func NewMetrics() *Metrics { return &Metrics{} }

// of returns the counters of a series, creating them on first use; once
// MaxSeries exist, a new one is fallback's (a label from the
// configuration).
func (m *Metrics) of(domain, descriptor, fallback string) *counters {
	if c, ok := m.series.Load(seriesKey{domain, descriptor}); ok {
		return c.(*counters)
	}
	if descriptor != fallback && m.count.Load() >= MaxSeries {
		return m.of(domain, fallback, fallback)
	}
	k := seriesKey{strings.Clone(domain), strings.Clone(descriptor)}
	c, loaded := m.series.LoadOrStore(k, &counters{domain: k.domain, descriptor: k.descriptor})
	if !loaded {
		m.count.Add(1)
	}
	return c.(*counters)
}

// InitConfig creates the series of every limit of cfg whose label does not
// depend on the request, so they are exported as zeros before the first
// request.
func (m *Metrics) InitConfig(cfg *Config) {
	if m == nil || cfg == nil {
		return
	}
	for _, name := range cfg.Domains() {
		d := cfg.Domain(name)
		m.of(name, "", "")
		for _, l := range d.all {
			if !l.DetailedMetric {
				m.of(name, l.metric, l.metric)
			}
		}
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHits, descOver, descNear, descWithin, descShadow, descRequests, descUnknown, descStoreErrors} {
		ch <- d
	}
}

var (
	labels   = []string{"domain", "descriptor"}
	descHits = prometheus.NewDesc("sluice_rls_hits_total",
		"Hits (the sum of hits_addend) of the descriptors matching each limit.", labels, nil)
	descOver = prometheus.NewDesc("sluice_rls_over_limit_total",
		"Hits over the limit, shadow_mode limits' included; none of them was spent.", labels, nil)
	descNear = prometheus.NewDesc("sluice_rls_near_limit_total",
		"Allowed hits past 80% of the limit.", labels, nil)
	descWithin = prometheus.NewDesc("sluice_rls_within_limit_total",
		"Allowed hits.", labels, nil)
	descShadow = prometheus.NewDesc("sluice_rls_shadow_mode_total",
		"Hits a shadow_mode limit was over and answered OK.", labels, nil)
	descRequests = prometheus.NewDesc("sluice_rls_requests_total",
		"ShouldRateLimit requests answered, by domain and overall code.", []string{"domain", "code"}, nil)
	descUnknown = prometheus.NewDesc("sluice_rls_unknown_domain_total",
		"ShouldRateLimit requests naming a domain no file configures (answered OK).", nil, nil)
	descStoreErrors = prometheus.NewDesc("sluice_rls_store_errors_total",
		"ShouldRateLimit requests the store failed (answered UNAVAILABLE).", nil, nil)
)

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	all := make([]*counters, 0, m.count.Load())
	m.series.Range(func(_, c any) bool {
		all = append(all, c.(*counters))
		return true
	})
	slices.SortFunc(all, func(a, b *counters) int {
		if c := strings.Compare(a.domain, b.domain); c != 0 {
			return c
		}
		return strings.Compare(a.descriptor, b.descriptor)
	})
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	for _, c := range all {
		if c.descriptor == "" {
			counter(descRequests, c.requestsOK.Load(), c.domain, "ok")
			counter(descRequests, c.requestsOver.Load(), c.domain, "over_limit")
			continue
		}
		counter(descHits, c.hits.Load(), c.domain, c.descriptor)
		counter(descOver, c.over.Load(), c.domain, c.descriptor)
		counter(descNear, c.near.Load(), c.domain, c.descriptor)
		counter(descWithin, c.within.Load(), c.domain, c.descriptor)
		counter(descShadow, c.shadow.Load(), c.domain, c.descriptor)
	}
	counter(descUnknown, m.unknownDomain.Load())
	counter(descStoreErrors, m.storeErrors.Load())
}

// Snapshot returns the counts of one series: hits, over the limit, near
// it, within it, and shadow_mode would-be denials.
func (m *Metrics) Snapshot(domain, descriptor string) (hits, over, near, within, shadow uint64) {
	v, ok := m.series.Load(seriesKey{domain, descriptor})
	if !ok {
		return
	}
	c := v.(*counters)
	return c.hits.Load(), c.over.Load(), c.near.Load(), c.within.Load(), c.shadow.Load()
}
