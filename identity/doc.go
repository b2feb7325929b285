// Package identity turns a request into the caller key a rule's budget is
// counted under. It is the one home of caller identity for every door
// (package httplimit now, a gRPC door later): the "identity" section of the
// configuration file is its Config, and its defaults are the only ones.
//
// An Identifier reads three things a door knows of a request: the
// connection's peer address, the request's headers (through Header, so that
// net/http's http.Header and gRPC metadata both fit) and, when the program
// supplies one, a Caller it has verified itself. From them Key composes
// "user:…", "key:…" (a hash of the API key), "ip:…" (the client address,
// IPv6 grouped by a prefix) or "global".
//
// Plan and PlanFor give the caller's plan, for rules with a plan: from a
// Caller the program supplies, or from the configured plan header, which is
// believed only from a trusted proxy. ParseKey turns a caller key as an
// operator writes it (user:alice, key: and the raw API key, ip:192.0.2.1,
// {attr:acme}user:alice for a user within an organisation in a group of
// rules) into the key the doors count it under, for overrides, resets and
// the admin endpoints; ShowKey is its reverse.
//
// The client address is the peer's, unless the peer is a trusted proxy:
// then it is read from the one forwarding header the proxies set
// (X-Forwarded-For by default, or Forwarded), walking from the right past
// the trusted hops. The other header is ignored from every peer. The parser
// of both headers is in forwarded.go.
//
// An Identifier is immutable and safe for concurrent use.
package identity
