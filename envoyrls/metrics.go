package envoyrls

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// NearLimitRatio is the default share of a limit past which allowed hits
// count as near the limit, envoyproxy/ratelimit's default NEAR_LIMIT_RATIO;
// Options.NearLimitRatio sets another.
const NearLimitRatio = 0.8

// Metrics counts what a Server decides, per domain and descriptor (the
// metric label of Match), in hits (a request of hits_addend 3 is 3 hits), as
// envoyproxy/ratelimit's statistics do: every hit of a matched limit, hits
// over the limit (shadow_mode ones included), allowed hits past
// Options.NearLimitRatio of the limit, allowed hits, and hits a shadow_mode limit
// would have denied; and per domain the requests answered, by overall code
// (ok, over_limit), requests naming a domain not configured, and requests
// the store failed (answered UNAVAILABLE). Counts reads them; package
// envoyrls/rlsmetrics exports them to Prometheus.
//
// No label takes a value a client chooses but through the configuration:
// a domain no file configures is counted in UnknownDomain alone, a
// descriptor that carries its own limit is counted under "override", and
// the series that detailed_metric and value_to_metric build from request
// values are at most MaxSeries in all; past that, a new one is counted
// under its limit's own label (its path without values).
//
// The counting path takes no lock. Series live until the Metrics is
// dropped, so a counter never goes backwards across reloads. Safe for
// concurrent use.
type Metrics struct {
	series sync.Map     // seriesKey → *counters
	count  atomic.Int64 // series in the map

	unknownDomain, storeErrors atomic.Uint64
	charged, refunded          atomic.Uint64 // units settled on stream done
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

// Series is the counts of one series: a domain and a descriptor label, in
// hits.
type Series struct {
	Domain, Descriptor string
	// Hits counts every hit of a matched limit; OverLimit those over the
	// limit (shadow_mode ones included), none of them spent; NearLimit the
	// allowed ones past the server's NearLimitRatio of the limit; WithinLimit the
	// allowed ones; ShadowMode those a shadow_mode limit was over and
	// answered OK.
	Hits, OverLimit, NearLimit, WithinLimit, ShadowMode uint64
}

// DomainRequests is the ShouldRateLimit requests of one domain answered,
// by overall code.
type DomainRequests struct {
	Domain        string
	OK, OverLimit uint64
}

// Counts are what a Metrics has counted, as Metrics.Counts reads them.
type Counts struct {
	// Series are the descriptors' counts, sorted by domain, then
	// descriptor.
	Series []Series
	// Requests are the domains' request counts, sorted by domain.
	Requests []DomainRequests
	// UnknownDomain counts the requests naming a domain no file
	// configures (answered OK).
	UnknownDomain uint64
	// StoreErrors counts the requests the store failed (answered
	// UNAVAILABLE).
	StoreErrors uint64
	// SettledCharged and SettledRefunded are the units the calls made on
	// stream done charged beyond the estimates, and took back of them
	// (see SettleKey).
	SettledCharged, SettledRefunded uint64
}

// Counts reads every count now. Each counter is read atomically, the whole
// not at one instant: a decision made meanwhile may show in some counts
// and not yet in others.
func (m *Metrics) Counts() Counts {
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
	var out Counts
	for _, c := range all {
		if c.descriptor == "" {
			out.Requests = append(out.Requests, DomainRequests{Domain: c.domain, OK: c.requestsOK.Load(), OverLimit: c.requestsOver.Load()})
			continue
		}
		out.Series = append(out.Series, Series{Domain: c.domain, Descriptor: c.descriptor, Hits: c.hits.Load(), OverLimit: c.over.Load(),
			NearLimit: c.near.Load(), WithinLimit: c.within.Load(), ShadowMode: c.shadow.Load()})
	}
	out.UnknownDomain, out.StoreErrors = m.unknownDomain.Load(), m.storeErrors.Load()
	out.SettledCharged, out.SettledRefunded = m.charged.Load(), m.refunded.Load()
	return out
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
