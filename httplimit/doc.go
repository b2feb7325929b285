// Package httplimit puts sluice in front of net/http handlers: New returns
// the middleware.
//
// The caller's key comes from package identity, the one home of caller
// identity: the user id or API key (from headers, or from an IdentityFunc
// the program supplies), the client IP address (the connection's peer, or
// the client named by the configured forwarding header when the peer is a
// trusted proxy; IPv6 grouped by a prefix) or one key for everyone. Read
// identity.Identifier's documentation before trusting an identity header.
//
// The package imports no YAML, file watching or metrics library: a
// sluice.Observer (package metrics' *Metrics, for one) is told each
// decision.
package httplimit
