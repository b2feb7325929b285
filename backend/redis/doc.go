// Package redis is the store for a fleet: a backend.Swapper over Redis (or
// a protocol-compatible server), standalone or Cluster, so that every
// gateway of a fleet spends one budget per caller.
//
// The algorithms stay in Go: Redis Lua has only float64 numbers, and
// Sluice's records hold int64 nanoseconds and 128-bit products. Each key
// is one Redis string holding exactly the record package codec defines,
// with PX set to the decision's TTL (so Redis forgets a record exactly
// when it has become equivalent to none). The engine steps the record it
// last saw and commits with one Lua compare-and-swap script, loaded once
// and called by EVALSHA (EVAL when Redis has lost it): the script writes
// every key of the decision if each still holds what the engine expected,
// else writes nothing and returns the current records. An expected record
// longer than 40 bytes (a sliding log) is sent as its SHA-1, not whole.
// Every reply carries the server's TIME, which the engine uses as its
// clock, so gateways whose clocks disagree decide as one.
//
// A decision on one key (every decision but a multi-limit one) runs a
// shorter script of its own. While more than ClientOptions.PipelineAbove
// of them are in flight, as with many callers over many keys, the next
// goes through go-redis' AutoPipeliner, which writes concurrent calls
// together; a hot key, whose decisions the engine coalesces into one call
// at a time, stays on the plain path.
//
// # Keys
//
// A rule's record for a caller is stored under
//
//	<prefix>{<caller key>}:<rule>
//
// for example sluice:{user:42}:orders, so that all the limits of one caller
// share a Cluster hash tag and a multi-limit decision is one script. A
// level of a hierarchy counted within its tenant (a caller key made by
// backend.NestedKey: a user's within an organisation) is stored under
//
//	<prefix>{<tenant's key>}{<own key>}:<rule>
//
// for example sluice:{attr:acme}{user:42}:user-minute, under the tenant's
// hash tag, so that every level of one tenant's request lies on the
// tenant's slot and the decision is one script too. In the caller's, the
// tenant's and the own key '%', '{' and '}' are written %25, %7B and %7D.
//
// # Failures
//
// Every call has a deadline (Options.Timeout, 50ms by default), which
// covers waiting for a pooled connection and setting up a new one (dial,
// TLS, handshake): no decision waits longer. A circuit breaker judges
// Redis by its error rate over a window (Options.BreakerWindow, 1s), once
// the window holds a minimum of calls (Options.BreakerMinCalls, 20): when
// at least Options.BreakerFailureRate (half) of them failed, it opens, and
// calls fail at once with ErrUnavailable, but for one at a time that
// probes Redis; the first probe Redis answers closes it. So one slow
// moment does not open it, a Redis that does not answer costs each call
// at most its deadline until the breaker opens, and a Redis that comes
// back serves the next call. Store.Breaker reports its state. The engine
// turns either error into an engine.ErrStore, and the doors apply their
// on_store_error policy.
package redis
