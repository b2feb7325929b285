package envoyrls

// What the tests of package envoyrls_test, which read their domains with
// package rlsfile (itself importing envoyrls), see of the package's
// insides.

// WildcardMatch is wildcardMatch.
var WildcardMatch = wildcardMatch

// OverrideMetric is the descriptor label of the limits requests bring.
const OverrideMetric = overrideMetric
