// Package httplimit puts sluice in front of net/http handlers. New returns
// middleware deciding by rules matched by method and path (a
// sluice.Registry); PerHandler returns middleware deciding every request
// of the handlers it wraps by one sluice.Limiter, under a key and a cost
// the program computes from the request. Both send the same rate-limit
// headers, and both put the decision in the request's context for the
// handler when asked to (DecisionInContext in their configurations):
// DecisionFrom.
//
// The caller's key comes from package identity, the one home of caller
// identity: the user id or API key (from headers, or from an IdentityFunc
// the program supplies), the client IP address (the connection's peer, or
// the client named by the configured forwarding header when the peer is a
// trusted proxy; IPv6 grouped by a prefix) or one key for everyone. Read
// identity.Identifier's documentation before trusting an identity header.
//
// When the rules in force name plans, the caller's plan comes from the
// IdentityFunc's Caller.Plan or from the identity section's plan header,
// believed only from a trusted proxy, and the request is matched with its
// plan; a caller with an override is decided under its own limit
// (sluice.Ruleset.Override). See plan.go.
//
// The decision is sluice.Door's, the one every door makes: the middleware
// reads the request for it (method, path, host, plan, and the caller's key
// and cost under each rule) and turns its sluice.Outcome into headers and
// a status.
//
// The package imports no YAML, file watching or metrics library: a
// sluice.Observer (package metrics' *Metrics, for one) is told each
// decision.
package httplimit
