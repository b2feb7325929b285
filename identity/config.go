package identity

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluice-go/sluice"
)

// Defaults a Config falls back to for the fields it leaves zero; the
// configuration file's "identity" section has the same ones, since it is
// read into a Config.
const (
	DefaultUserHeader       = "X-User-ID"
	DefaultAPIKeyHeader     = "X-API-Key"
	DefaultIPv6Prefix       = 64
	DefaultForwardingHeader = XForwardedFor
)

// Bounds on identity values, so that a caller key stays short whatever a
// client sends.
const (
	// MaxUserIDLen is the longest user id, in bytes, Key accepts; a longer
	// one is an ErrIdentityTooLong.
	MaxUserIDLen = 256
	// MaxAPIKeyLen is the longest API key, in bytes, Key accepts; a longer
	// one is an ErrIdentityTooLong. (API keys are hashed into the caller
	// key, so this bounds the hashing work, not the key.)
	MaxAPIKeyLen = 1024
)

// ForwardingHeader names the header trusted proxies put the client's
// address in. Only that one is read, and only from a trusted peer; the
// other is ignored from every peer, so a client cannot move its request
// onto another key by adding the header its proxy does not maintain.
type ForwardingHeader string

// The forwarding headers.
const (
	// XForwardedFor, the default, is the de facto X-Forwarded-For: a
	// comma-separated list of addresses, each proxy appending its peer's
	// (nginx's $proxy_add_x_forwarded_for, HAProxy's option forwardfor).
	XForwardedFor ForwardingHeader = "x-forwarded-for"
	// Forwarded is RFC 7239's Forwarded header, read for its for= nodes.
	Forwarded ForwardingHeader = "forwarded"
)

// Valid reports whether h is XForwardedFor or Forwarded.
func (h ForwardingHeader) Valid() bool { return h == XForwardedFor || h == Forwarded }

// Errors of Key and ClientIP. Check them with errors.Is.
var (
	// ErrBadIdentity is matched by every error that the request's identity
	// headers (or the Caller a program supplied) are unusable: the client's
	// fault, to be answered as a bad request.
	// It is sluice.ErrBadIdentity, which the Door's own identity errors
	// (a path parameter too long) match too.
	ErrBadIdentity = sluice.ErrBadIdentity
	// ErrIdentityTooLong: a user id longer than MaxUserIDLen, an API key
	// longer than MaxAPIKeyLen, or a header or attribute a rule counts by
	// longer than sluice.MaxAttrLen. It matches ErrBadIdentity.
	ErrIdentityTooLong = fmt.Errorf("%w: value too long", ErrBadIdentity)
	// ErrBadForwarding: a trusted proxy's forwarding header (the one
	// configured) has a hop that cannot be read where the client should
	// be, so the client's address cannot be told (see
	// Identifier.ClientIP). It matches ErrBadIdentity.
	ErrBadForwarding = fmt.Errorf("%w: unreadable forwarding header", ErrBadIdentity)
	// ErrAmbiguousIdentity: an identity header given more than once. It
	// matches ErrBadIdentity.
	ErrAmbiguousIdentity = fmt.Errorf("%w: header given more than once", ErrBadIdentity)
	// ErrNoPeerAddr: the request has no peer IP address (a Unix socket
	// listener, or a handler test that left it empty). No IP key can be
	// made for such a request.
	ErrNoPeerAddr = errors.New("sluice/identity: request has no peer IP address")
	// ErrUnknownScope: Key was asked for a scope other than the four of
	// sluice.Scopes and those of a header, an attribute or a parameter.
	ErrUnknownScope = errors.New("sluice/identity: unknown scope")
)

// Config says how a request is turned into a caller identity. It is the
// "identity" section of the configuration file, key for key. The zero
// value means every default: the user id in X-User-ID, the API key in
// X-API-Key, IPv6 callers grouped by /64, and no trusted proxy, so that the
// client address is always the connection's peer.
type Config struct {
	// UserHeader is "user_header", the header holding the user id;
	// DefaultUserHeader when empty.
	UserHeader string
	// APIKeyHeader is "api_key_header", the header holding the API key;
	// DefaultAPIKeyHeader when empty.
	APIKeyHeader string
	// TrustedProxies is "trusted_proxies": the peers whose forwarding
	// header is believed. Empty by default: none is, and the client address
	// is the peer's. A client on a trusted address is trusted too: it may
	// name any address in the header, so list only the proxies' own.
	// IPv4-mapped IPv6 prefixes are read as IPv4.
	TrustedProxies []netip.Prefix
	// ForwardingHeader is "forwarding_header", the header the trusted
	// proxies set: XForwardedFor (the default when empty) or Forwarded.
	ForwardingHeader ForwardingHeader
	// IPv6Prefix is "ipv6_prefix", the prefix length IPv6 callers are
	// grouped by, 1 to 128; DefaultIPv6Prefix (64) when zero.
	IPv6Prefix int
	// HeadersFromTrustedProxiesOnly is
	// "headers_from_trusted_proxies_only": when true, the user and API key
	// headers are believed only on requests whose peer (the connection
	// itself, not a forwarded address) is a trusted proxy, the
	// authenticating layer in front; from any other peer they are ignored
	// and the caller is anonymous. False by default. It does not apply to a
	// Caller the program supplies (KeyFor).
	HeadersFromTrustedProxiesOnly bool
	// PlanHeader is "plan_header", the header holding the caller's plan
	// (such as X-Sluice-Plan), for rules with a plan. It is believed only
	// on requests whose peer (the connection itself) is a trusted proxy,
	// whatever HeadersFromTrustedProxiesOnly says, since a plan is a
	// privilege a client must not grant itself: the proxy in front must set
	// it and overwrite whatever the client sent. Empty by default: no plan
	// header is read, and plans come only from a Caller the program
	// supplies (PlanFor).
	PlanHeader string
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.UserHeader == "" {
		c.UserHeader = DefaultUserHeader
	}
	if c.APIKeyHeader == "" {
		c.APIKeyHeader = DefaultAPIKeyHeader
	}
	if c.ForwardingHeader == "" {
		c.ForwardingHeader = DefaultForwardingHeader
	}
	if c.IPv6Prefix == 0 {
		c.IPv6Prefix = DefaultIPv6Prefix
	}
	return c
}

// ParseTrustedProxy parses an address ("10.0.0.1", meaning /32 or /128)
// or a prefix ("10.0.0.0/8") of trusted proxies. The prefix is masked, and
// IPv4-mapped IPv6 is read as IPv4.
func ParseTrustedProxy(s string) (netip.Prefix, error) {
	var pfx netip.Prefix
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("want an address or a prefix such as 10.0.0.0/8, got %q", s)
		}
		pfx = p
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("want an address or a prefix such as 10.0.0.0/8, got %q", s)
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	return normalizeProxy(pfx)
}

// normalizeProxy checks a trusted proxy prefix, reads an IPv4-mapped one as
// IPv4 and masks it.
func normalizeProxy(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() || p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("invalid trusted proxy prefix %v", p)
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("an IPv4-mapped prefix must be /96 or longer, got %q", p.String())
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// ValidHeaderName reports whether s is a valid HTTP header field name (an
// RFC 9110 token).
func ValidHeaderName(s string) bool { return isToken(s) }
