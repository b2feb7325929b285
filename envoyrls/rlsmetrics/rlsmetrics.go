// Package rlsmetrics exports what an envoyrls.Server counts (its
// envoyrls.Metrics) as Prometheus series, apart from package envoyrls so
// that a program embedding the server without Prometheus does not import
// it.
package rlsmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice/envoyrls"
)

// Collector is a prometheus.Collector of an envoyrls.Metrics, in hits (a
// request of hits_addend 3 is 3 hits), as envoyproxy/ratelimit's
// statistics count:
//
//	sluice_rls_hits_total{domain,descriptor}          every hit of a matched limit
//	sluice_rls_over_limit_total{domain,descriptor}    hits over the limit (shadow_mode ones included)
//	sluice_rls_near_limit_total{domain,descriptor}    allowed hits past the near-limit ratio of the limit (envoyrls.Options.NearLimitRatio)
//	sluice_rls_within_limit_total{domain,descriptor}  allowed hits
//	sluice_rls_shadow_mode_total{domain,descriptor}   hits a shadow_mode limit would have denied
//	sluice_rls_requests_total{domain,code}            requests answered, by overall code (ok, over_limit)
//	sluice_rls_unknown_domain_total                   requests naming a domain not configured
//	sluice_rls_store_errors_total                     requests the store failed (answered UNAVAILABLE)
//	sluice_rls_settled_units_total{kind}              units settled on stream done (charged, refunded)
//
// The labels are bounded as envoyrls.Metrics bounds them. Safe for
// concurrent use.
type Collector struct {
	m *envoyrls.Metrics
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the Collector of m.
func NewCollector(m *envoyrls.Metrics) *Collector { return &Collector{m: m} }

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
	descSettled = prometheus.NewDesc("sluice_rls_settled_units_total",
		"Units the calls made on stream done charged beyond the estimates (kind=charged) or took back of them (kind=refunded).", []string{"kind"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHits, descOver, descNear, descWithin, descShadow, descRequests, descUnknown, descStoreErrors, descSettled} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counts := c.m.Counts()
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	for _, r := range counts.Requests {
		counter(descRequests, r.OK, r.Domain, "ok")
		counter(descRequests, r.OverLimit, r.Domain, "over_limit")
	}
	for _, s := range counts.Series {
		counter(descHits, s.Hits, s.Domain, s.Descriptor)
		counter(descOver, s.OverLimit, s.Domain, s.Descriptor)
		counter(descNear, s.NearLimit, s.Domain, s.Descriptor)
		counter(descWithin, s.WithinLimit, s.Domain, s.Descriptor)
		counter(descShadow, s.ShadowMode, s.Domain, s.Descriptor)
	}
	counter(descUnknown, counts.UnknownDomain)
	counter(descStoreErrors, counts.StoreErrors)
	counter(descSettled, counts.SettledCharged, "charged")
	counter(descSettled, counts.SettledRefunded, "refunded")
}
