// Package sluice is an embedded rate limiter for Go: rules that say who may
// do what how often, matched to requests and enforced by package engine over
// a pluggable store.
//
// The shortest path is a Limiter: NewLimiter(limit, window) is one budget
// per key over the memory store and the system clock, with Allow, Take,
// Wait and Reset, and the same limiter over Pebble, bbolt or Redis is one
// option away (WithStore). The rest of this package is the rules a
// gateway matches to requests, and the decision every door makes on them.
//
// A Rule is one configured limit: the requests it covers (an HTTP method or
// AnyMethod, and a path prefix), whose budget they spend (its Scope: user,
// API key, IP address or everyone), and the algorithm, limit, window,
// optional burst and per-request cost that decide. Rule.Validate refuses an
// impossible rule at load time, naming the rule and the field.
//
// A Ruleset is a validated, immutable set of rules with an optional default
// rule for requests no rule covers and a MatchMode. It matches a request by
// its RequestShape (method, path, host, caller's plan: Ruleset.AppendMatch, and
// AppendMatchShadow for the shadow rules): MatchMostSpecific applies
// the single most specific rule (longest path prefix, then an exact method
// over AnyMethod), MatchAll every covering rule, all-or-nothing through
// engine.Engine.ApplyAll. Each CompiledRule carries its engine.Limit, whose
// namespace is the rule's name, so two rules never share a counter.
//
// A path is matched in one canonical form, CanonicalPath (repeated slashes
// merged, dot-segments removed), so no spelling an upstream routes alike
// walks past a rule; in any case of its letters with PathCaseInsensitive
// (NewRulesetWith). A GET rule covers HEAD requests unless a HEAD rule of
// the same path prefix exists. path.go says what happens to %2F and the
// query.
//
// A rule may carry a Plan: it then applies only to that plan's callers, in
// place of the plan-less rule of the same match (RequestShape.Plan in
// Ruleset.AppendMatch; plan.go states the rule precisely). An Override gives
// one caller its own limit, window or burst under a rule
// (Ruleset.WithOverrides, Ruleset.Override); it keeps the rule's record, so
// what the caller spent carries over.
//
// A Decider is the decision core every door calls (core.go): given a request's
// batch (for each limit covering it, the engine's limit, key and cost), it
// spends on the engine, follows the StoreErrorPolicy when the store fails (a
// LocalFallback decides under FailLocal), and tells the Observer; Pick chooses
// the decision the answer reports. A Door is a door of rules over one (door.go
// states its steps, decide.go is its request path): match, key the caller under
// each rule, apply the caller's overrides, hand the batch to its Decider, then
// decide the shadow rules of a request that passes. It returns an Outcome.
// Package httplimit's middleware, package grpclimit's interceptors and package
// replay each wrap a Door, and only read requests for it and turn its Outcome
// into an answer; package envoyrls' server matches descriptors into a batch of
// its own and hands it to a Decider. The rate-limit fields every door sends are
// one function of a decision (CompiledRule.Policy, AppendRateLimit; package
// internal/ratefield).
//
// A Registry holds the ruleset in force and replaces it whole with one
// atomic pointer swap: readers take no lock and never see half a ruleset.
// Across a swap, a rule that keeps its name and algorithm keeps its callers'
// spent budget, even when its limit or window changes; a rule whose algorithm
// changes starts its callers fresh, because the stored record is of another
// kind.
//
// This package is what a program that builds its rules in Go needs, and
// it imports no YAML, file watching or metrics library. The rest lives
// beside it: package config reads the gateway's YAML file and watches it,
// package metrics is the Prometheus collector (an Observer), package
// sluiceotel its OpenTelemetry counterpart, package identity turns a
// request into a caller key, and packages httplimit and grpclimit are the
// net/http middleware and the gRPC interceptors.
//
// Rulesets, CompiledRules, Registries and Doors are safe for concurrent
// use.
package sluice
