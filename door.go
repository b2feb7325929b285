package sluice

import (
	"fmt"
	"time"
)

// StoreErrorPolicy says what a door (package httplimit's middleware,
// package grpclimit's interceptors) does with a request when the store
// fails and no decision can be made. A shadow rule (Rule.Shadow) never
// refuses a request, whatever the policy.
type StoreErrorPolicy string

// The store error policies.
const (
	// FailOpen, the default, lets the request pass (the error is logged
	// and counted).
	FailOpen StoreErrorPolicy = "open"
	// FailClosed refuses the request (503 Service Unavailable over HTTP,
	// codes.Unavailable over gRPC).
	FailClosed StoreErrorPolicy = "closed"
	// FailLocal decides the request in-process instead, with a Local: on
	// an in-process engine, under the rule divided by the fleet's size, so
	// that a fleet of gateways sharing a store (Redis) keeps limiting,
	// approximately, while the store is down. The next request tries the
	// store again; the store's circuit breaker makes that attempt fail at
	// once while it stays down. The error is logged and counted, and so is
	// each decision made locally (LocalObserver).
	FailLocal StoreErrorPolicy = "local"
)

// StoreErrorPolicies lists every valid StoreErrorPolicy, in a stable order.
var StoreErrorPolicies = []StoreErrorPolicy{FailOpen, FailClosed, FailLocal}

// Valid reports whether p is one of StoreErrorPolicies. The empty policy
// is not valid here; the doors read it as FailOpen.
func (p StoreErrorPolicy) Valid() bool {
	switch p {
	case FailOpen, FailClosed, FailLocal:
		return true
	}
	return false
}

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

// LocalObserver is an Observer that is also told which decisions were made
// in-process under the FailLocal policy. A door tells ObserveDecisionCost
// of every decision, local ones included, and ObserveLocalDecision of a
// local one besides; an Observer that is not a LocalObserver still sees
// every decision.
type LocalObserver interface {
	Observer
	// ObserveLocalDecision records that a decision under the named rule,
	// allowed or denied, was made in-process because the store failed.
	ObserveLocalDecision(rule string, allowed bool)
}

// ShadowObserver is an Observer that is also told what shadow rules
// (Rule.Shadow) would have denied. A door tells ObserveDecisionCost of a
// shadow rule's allowed decisions, as of any rule's, and
// ObserveShadowDenial, not ObserveDecisionCost, of its would-be denials:
// those requests passed, so a count of denials stays a count of requests
// refused. An Observer that is not a ShadowObserver is not told of
// would-be denials at all.
type ShadowObserver interface {
	Observer
	// ObserveShadowDenial records that the named shadow rule would have
	// denied a request of the given cost, which passed and spent nothing
	// under the rule; d is the time the engine took to decide.
	ObserveShadowDenial(rule string, cost int64, d time.Duration)
}

// DoorPolicy checks the store error policy a door is configured with and
// returns the policy in force and the Local it decides on: the empty
// policy is FailOpen, FailLocal requires local, and local is dropped (nil)
// under any other policy. Its errors name the door's Config fields,
// prefixed by door (the package name, such as "httplimit").
func DoorPolicy(door string, p StoreErrorPolicy, local *Local) (StoreErrorPolicy, *Local, error) {
	switch p {
	case "":
		p = FailOpen
	case FailOpen, FailClosed:
	case FailLocal:
		if local == nil {
			return "", nil, fmt.Errorf("%s: Config.Local is required with OnStoreError %q", door, FailLocal)
		}
		return p, local, nil
	default:
		return "", nil, fmt.Errorf("%s: Config.OnStoreError must be %q, %q or %q, got %q", door, FailOpen, FailClosed, FailLocal, string(p))
	}
	return p, nil, nil
}
