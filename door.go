package sluice

import "time"

// StoreErrorPolicy says what a door (package httplimit's middleware) does
// with a request when the store fails and no decision can be made.
type StoreErrorPolicy string

// The store error policies.
const (
	// FailOpen, the default, lets the request pass (the error is logged
	// and counted).
	FailOpen StoreErrorPolicy = "open"
	// FailClosed refuses the request (503 Service Unavailable over HTTP).
	FailClosed StoreErrorPolicy = "closed"
)

// Observer is told what a door decides: each decision under a rule and
// each store error met. Package metrics' *Metrics is one, exporting them to
// Prometheus; the interface keeps the doors free of any metrics library.
//
// A door calls it on the request path after the engine has returned, never
// under an engine stripe lock, so an Observer must be fast, must not block
// and must be safe for concurrent use.
type Observer interface {
	// ObserveDecisionCost records one decision under the named rule:
	// allowed or denied, the cost an allowed one spent, and d, the time
	// the engine took to decide.
	ObserveDecisionCost(rule string, allowed bool, cost int64, d time.Duration)
	// ObserveStoreError records a store error met under the named rule and
	// the policy that then applied.
	ObserveStoreError(rule string, policy StoreErrorPolicy)
}
