package envoyrls

// What the tests of package envoyrls_test, which read their domains with
// package rlsfile (itself importing envoyrls), see of the package's
// insides.

// WildcardMatch is wildcardMatch.
var WildcardMatch = wildcardMatch

// OverrideMetric is the descriptor label of the limits requests bring.
const OverrideMetric = overrideMetric

// UnknownDomain is the count of requests naming a domain not configured.
func (m *Metrics) UnknownDomain() uint64 { return m.unknownDomain.Load() }

// SeriesCount is the number of series kept.
func (m *Metrics) SeriesCount() int64 { return m.count.Load() }
