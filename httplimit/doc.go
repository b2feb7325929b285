// Package httplimit puts sluice in front of net/http handlers.
//
// An Identifier turns a request into the key a rule's budget is counted
// under: the caller's user id or API key (from headers, or from an
// IdentityFunc the program supplies), its IP address (the connection's peer,
// or the client named by X-Forwarded-For or Forwarded when the peer is a
// trusted proxy; IPv6 grouped by a prefix) or one key for everyone. Read the
// Identifier's documentation before trusting an identity header.
package httplimit
