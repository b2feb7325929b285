package envoyrls

import "strings"

// What the tests of package envoyrls_test, which read their domains with
// package rlsfile (itself importing envoyrls), see of the package's
// insides.

// WildcardMatch is wildcardMatch.
var WildcardMatch = wildcardMatch

// OverrideMetric is the descriptor label of the limits requests bring.
const OverrideMetric = overrideMetric

// CountReplaceLookups makes ShouldRateLimit count the replaced names it
// compares while f runs, and returns the count. Not for parallel tests.
func CountReplaceLookups(f func()) int64 {
	countLookups = true
	lookups.Store(0)
	defer func() { countLookups = false }()
	f()
	return lookups.Load()
}

// AppendKeyField is appendKeyField, FieldSize fieldSize, BoundLabelValue
// writeLabelValue's result.
var (
	AppendKeyField = appendKeyField
	FieldSize      = fieldSize
)

// BoundLabelValue returns what writeLabelValue writes for v.
func BoundLabelValue(v string) string {
	var b strings.Builder
	writeLabelValue(&b, v)
	return b.String()
}
