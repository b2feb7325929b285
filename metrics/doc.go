// Package metrics counts what a gateway decides and exports it to
// Prometheus: per rule, the allowed and denied decisions, the cost spent,
// the decision latency, the store errors and the would-be denials of shadow
// rules; the configuration reloads; and,
// through Collector, the engine's own counters. A *Metrics is the
// sluice.Observer a door is given and the reload counter of a configuration
// watcher.
//
// It lives apart from the root package so that a program that builds its
// rules in Go and uses the middleware imports no Prometheus.
package metrics
