package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluice-go/sluice"
)

// Defaults an IdentifierConfig falls back to for the fields it leaves zero.
// They match the root package's defaults for the "identity" section.
const (
	DefaultUserHeader   = "X-User-ID"
	DefaultAPIKeyHeader = "X-API-Key"
	DefaultIPv6Prefix   = 64
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

// The rule scopes Key knows; the same strings as the root package's
// sluice.Scope values.
const (
	scopeUser   = "user"
	scopeAPIKey = "api_key"
	scopeIP     = "ip"
	scopeGlobal = "global"
)

// Errors from ClientIP and Key. Check them with errors.Is.
var (
	// ErrBadIdentity is matched by every error that the request's identity
	// headers (or the IdentityFunc's result) are unusable: the client's
	// fault, to be answered with 400 Bad Request.
	ErrBadIdentity = errors.New("httplimit: bad caller identity")
	// ErrIdentityTooLong: a user id longer than MaxUserIDLen or an API key
	// longer than MaxAPIKeyLen. It matches ErrBadIdentity.
	ErrIdentityTooLong = fmt.Errorf("%w: value too long", ErrBadIdentity)
	// ErrAmbiguousIdentity: an identity header given more than once. It
	// matches ErrBadIdentity.
	ErrAmbiguousIdentity = fmt.Errorf("%w: header given more than once", ErrBadIdentity)
	// ErrNoPeerAddr: the request's RemoteAddr holds no IP address (a Unix
	// socket listener, or a handler test that left it empty). No IP key
	// can be made for such a request.
	ErrNoPeerAddr = errors.New("httplimit: request has no peer IP address")
	// ErrUnknownScope: Key was asked for a scope other than user, api_key,
	// ip and global.
	ErrUnknownScope = errors.New("httplimit: unknown scope")
)

// Identity is who a request says it comes from. An empty field means
// "not given": a caller with neither is anonymous.
type Identity struct {
	// UserID identifies the user, for rules scoped "user".
	UserID string
	// APIKey is the caller's API key, for rules scoped "api_key".
	APIKey string
}

// IdentityFunc is the embedding program's hook for the caller's identity,
// typically read from credentials an earlier middleware has verified (a
// token's subject in the request context). A returned error is passed on by
// Key, wrapped; the middleware answers it with 400 when it matches
// ErrBadIdentity and 500 otherwise. An IdentityFunc must be safe for
// concurrent use.
type IdentityFunc func(*http.Request) (Identity, error)

// IdentifierConfig configures an Identifier. Its fields mirror the root
// package's sluice.IdentityConfig (the "identity" section of the
// configuration file), plus Func.
type IdentifierConfig struct {
	// UserHeader holds the user id; DefaultUserHeader when empty.
	UserHeader string
	// APIKeyHeader holds the API key; DefaultAPIKeyHeader when empty.
	APIKeyHeader string
	// TrustedProxies are the peers whose X-Forwarded-For and Forwarded
	// headers are believed. Empty: none are, and the client IP is always
	// the connection's peer. IPv4-mapped IPv6 prefixes are read as IPv4.
	TrustedProxies []netip.Prefix
	// IPv6Prefix is the prefix length IPv6 clients are grouped by, 1 to
	// 128; DefaultIPv6Prefix (64) when zero.
	IPv6Prefix int
	// HeadersFromTrustedProxiesOnly makes the identity headers count only
	// on requests whose peer (the connection itself, not a forwarded
	// address) is one of TrustedProxies; from any other peer they are
	// ignored and the caller is anonymous. It has no effect when Func is
	// set.
	HeadersFromTrustedProxiesOnly bool
	// Func, when set, supplies the identity instead of the headers.
	Func IdentityFunc
}

// IdentifierConfigFrom returns the IdentifierConfig that the "identity"
// section of a configuration file (sluice.IdentityConfig) describes. Func,
// which no file can set, is left nil.
func IdentifierConfigFrom(c sluice.IdentityConfig) IdentifierConfig {
	return IdentifierConfig{
		UserHeader:                    c.UserHeader,
		APIKeyHeader:                  c.APIKeyHeader,
		TrustedProxies:                c.TrustedProxies,
		IPv6Prefix:                    c.IPv6Prefix,
		HeadersFromTrustedProxiesOnly: c.HeadersFromTrustedProxiesOnly,
	}
}

// Identifier turns a request into the key a rule's budget is counted
// under: Key. It is immutable and safe for concurrent use.
//
// # Who the caller is
//
// The identity comes from the IdentifierConfig's Func when one is set, and
// otherwise from the user and API key headers. An identity header is only
// as trustworthy as whatever sets it. Taken straight from the client, it is
// a claim, not a proof: a client that sends someone else's X-User-ID spends
// that user's budget (and can lock them out), and a client that invents a
// fresh X-User-ID on every request gets a fresh budget every time. Rate
// limiting by header is sound only when something the client cannot get
// around sets the header. So either
//
//   - set Func, fed from credentials an earlier middleware has verified
//     (a session, a signed token's subject, an API key looked up in your
//     database) — the recommended setup for an embedded limiter; or
//   - put an authenticating proxy in front that sets (and overwrites) the
//     headers, list it in TrustedProxies and set
//     HeadersFromTrustedProxiesOnly, so that the headers of a request that
//     did not come through that proxy are ignored.
//
// An anonymous caller (no identity, or headers ignored) under a user or
// API key rule is counted by its IP address instead.
//
// # Where the caller is
//
// The client IP (ClientIP) is the connection's peer address. The
// X-Forwarded-For and Forwarded headers are believed only when that peer is
// a trusted proxy; then the client is the right-most address in them that
// is not itself a trusted proxy, because each trusted proxy appends the
// address it received the request from, and everything to the left of
// that is whatever the client chose to send. A client that spoofs these
// headers therefore gains nothing: from an untrusted peer they are
// ignored, and through a trusted proxy its invented addresses sit to the
// left of the real one. See ClientIP for the details and for what happens
// with malformed headers.
type Identifier struct {
	userHeader, apiKeyHeader string // canonical header keys
	trusted                  []netip.Prefix
	v6bits                   int
	headersTrustedOnly       bool
	fn                       IdentityFunc
}

// NewIdentifier validates cfg and returns its Identifier. A header name
// that is not an HTTP token, an invalid trusted proxy prefix and an
// IPv6Prefix outside 1 to 128 are errors.
func NewIdentifier(cfg IdentifierConfig) (*Identifier, error) {
	id := &Identifier{
		userHeader:         cfg.UserHeader,
		apiKeyHeader:       cfg.APIKeyHeader,
		v6bits:             cfg.IPv6Prefix,
		headersTrustedOnly: cfg.HeadersFromTrustedProxiesOnly,
		fn:                 cfg.Func,
	}
	if id.userHeader == "" {
		id.userHeader = DefaultUserHeader
	}
	if id.apiKeyHeader == "" {
		id.apiKeyHeader = DefaultAPIKeyHeader
	}
	for _, h := range []*string{&id.userHeader, &id.apiKeyHeader} {
		if !isToken(*h) {
			return nil, fmt.Errorf("httplimit: want an HTTP header name, got %q", *h)
		}
		*h = http.CanonicalHeaderKey(*h)
	}
	if id.v6bits == 0 {
		id.v6bits = DefaultIPv6Prefix
	}
	if id.v6bits < 1 || id.v6bits > 128 {
		return nil, fmt.Errorf("httplimit: IPv6Prefix: want a prefix length from 1 to 128, got %d", cfg.IPv6Prefix)
	}
	id.trusted = make([]netip.Prefix, 0, len(cfg.TrustedProxies))
	for _, p := range cfg.TrustedProxies {
		if !p.IsValid() || p.Addr().Zone() != "" {
			return nil, fmt.Errorf("httplimit: invalid trusted proxy prefix %v", p)
		}
		if a := p.Addr(); a.Is4In6() {
			if p.Bits() < 96 {
				return nil, fmt.Errorf("httplimit: an IPv4-mapped trusted proxy prefix must be /96 or longer, got %v", p)
			}
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		id.trusted = append(id.trusted, p.Masked())
	}
	return id, nil
}

// isTrusted reports whether a (unmapped, no zone) is a trusted proxy.
func (id *Identifier) isTrusted(a netip.Addr) bool {
	for _, p := range id.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Key returns the key the caller of r is counted under by a rule of the
// given scope (a sluice.Scope as a string):
//
//	"user"     "user:" + the user id
//	"api_key"  "key:" + 32 hex digits of the SHA-256 of the API key
//	"ip"       "ip:" + the client IP: "ip:192.0.2.1", or for IPv6 its
//	           prefix, "ip:2001:db8:1:2::/64"
//	"global"   "global"
//
// The prefixes differ by scope, so no identity can pose as another kind
// (a user named "ip:192.0.2.1" is "user:ip:192.0.2.1"). API keys are
// hashed so that the secrets themselves are never stored in the limiter's
// state or shown in its output; user ids are kept as given, for
// readability, and bounded: one longer than MaxUserIDLen (or an API key
// longer than MaxAPIKeyLen) is an ErrIdentityTooLong, not silently cut,
// and an identity header sent twice is an ErrAmbiguousIdentity; both match
// ErrBadIdentity. Surrounding spaces and tabs in a header value are
// ignored.
//
// A caller without a user id (under "user") or an API key (under
// "api_key") is counted by its IP key. The identity comes from the
// configured Func when there is one; Key does not recover a panic in Func
// (the middleware contains it, as it would one in the handler).
func (id *Identifier) Key(r *http.Request, scope string) (string, error) {
	switch scope {
	case scopeGlobal:
		return "global", nil
	case scopeIP:
		return id.ipKey(r)
	case scopeUser, scopeAPIKey:
	default:
		return "", fmt.Errorf("%w %q", ErrUnknownScope, scope)
	}
	var v string
	if id.fn != nil {
		ident, err := id.fn(r)
		if err != nil {
			return "", fmt.Errorf("httplimit: identity: %w", err)
		}
		v = ident.UserID
		if scope == scopeAPIKey {
			v = ident.APIKey
		}
	} else if !id.headersTrustedOnly || id.peerTrusted(r) {
		name := id.userHeader
		if scope == scopeAPIKey {
			name = id.apiKeyHeader
		}
		vs := r.Header[name]
		if len(vs) > 1 {
			return "", fmt.Errorf("%w: %s", ErrAmbiguousIdentity, name)
		}
		if len(vs) == 1 {
			v = trimOWS(vs[0])
		}
	}
	if v == "" {
		return id.ipKey(r)
	}
	if scope == scopeUser {
		if len(v) > MaxUserIDLen {
			return "", fmt.Errorf("%w: the user id is %d bytes, over %d", ErrIdentityTooLong, len(v), MaxUserIDLen)
		}
		return "user:" + v, nil
	}
	if len(v) > MaxAPIKeyLen {
		return "", fmt.Errorf("%w: the API key is %d bytes, over %d", ErrIdentityTooLong, len(v), MaxAPIKeyLen)
	}
	sum := sha256.Sum256([]byte(v))
	var buf [4 + 32]byte
	copy(buf[:], "key:")
	hex.Encode(buf[4:], sum[:16])
	return string(buf[:]), nil
}

// peerTrusted reports whether r's peer is a trusted proxy; a request
// without a peer address is not.
func (id *Identifier) peerTrusted(r *http.Request) bool {
	peer, err := peerAddr(r.RemoteAddr)
	return err == nil && id.isTrusted(peer)
}

func (id *Identifier) ipKey(r *http.Request) (string, error) {
	a, err := id.ClientIP(r)
	if err != nil {
		return "", err
	}
	return id.IPKey(a), nil
}

// IPKey returns the key of the client address a under an "ip" rule: "ip:"
// and the IPv4 address, or the IPv6 address's prefix of the configured
// length. IPv4-mapped IPv6 is read as IPv4 and a zone is dropped.
func (id *Identifier) IPKey(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	var buf [64]byte
	b := append(buf[:0], "ip:"...)
	if a.Is4() {
		b = a.AppendTo(b)
	} else {
		b = netip.PrefixFrom(a, id.v6bits).Masked().AppendTo(b)
	}
	return string(b)
}

// ClientIP returns the address of the client that sent r, IPv4-mapped IPv6
// read as IPv4, without a zone.
//
// It is the connection's peer (r.RemoteAddr) unless that peer is a trusted
// proxy. Then the forwarding headers are read: X-Forwarded-For (a comma
// separated list of addresses; several header lines are concatenated in
// order) and Forwarded (RFC 7239; the for= parameter of each element, IPv6
// in brackets inside quotes, ports allowed). Walking a header from the
// right, each trusted proxy address is stepped over, and the first address
// that is not a trusted proxy is the client. When every address is a
// trusted proxy, the left-most is the client.
//
// The walk stops at the first hop it cannot read — garbage, an address
// with a zone, an element without for=, the obfuscated identifiers
// "unknown" and "_name" of RFC 7239 — and the client is then the last
// trusted hop read (the peer when there was none): a proxy that hides or
// mangles the address before it cannot be seen past, and nothing a client
// wrote is ever taken for an address in its place. Empty list elements are
// skipped. X-Forwarded-For entries may be bare addresses, "[v6]", "[v6]:port"
// or "v4:port"; Forwarded follows the RFC's node syntax strictly.
//
// When both headers are present and name different clients, one of them
// was written by the client (a proxy maintains one of them and passes the
// other along), and there is no telling which: the client is then the
// peer. Such requests share the trusted proxy's budget, so sending a
// conflicting header buys no fresh budget either. Configure the trusted
// proxy to strip the header it does not maintain to keep legitimate
// clients out of that case.
//
// The error is an ErrNoPeerAddr when RemoteAddr holds no IP address.
func (id *Identifier) ClientIP(r *http.Request) (netip.Addr, error) {
	peer, err := peerAddr(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, err
	}
	if !id.isTrusted(peer) {
		return peer, nil
	}
	xff, xffSeen := id.walkXFF(r.Header["X-Forwarded-For"], peer)
	fwd, fwdSeen := id.walkForwarded(r.Header["Forwarded"], peer)
	switch {
	case xffSeen && fwdSeen:
		if xff == fwd {
			return xff, nil
		}
		return peer, nil
	case xffSeen:
		return xff, nil
	case fwdSeen:
		return fwd, nil
	}
	return peer, nil
}

// peerAddr reads the address of a RemoteAddr: "host:port", or a bare
// address.
func peerAddr(remote string) (netip.Addr, error) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		a = ap.Addr()
	} else if a, err = netip.ParseAddr(remote); err != nil {
		if len(remote) > 64 {
			remote = remote[:64] + "..."
		}
		return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q", ErrNoPeerAddr, remote)
	}
	return a.Unmap().WithZone(""), nil
}

// walkXFF walks X-Forwarded-For values from the right (see ClientIP),
// starting after the trusted peer. seen reports whether there was any
// non-empty element.
func (id *Identifier) walkXFF(values []string, peer netip.Addr) (client netip.Addr, seen bool) {
	last := peer
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for {
			j := strings.LastIndexByte(v, ',')
			if elem := trimOWS(v[j+1:]); elem != "" {
				seen = true
				a, ok := parseXFFHop(elem)
				if !ok {
					return last, true
				}
				if !id.isTrusted(a) {
					return a, true
				}
				last = a
			}
			if j < 0 {
				break
			}
			v = v[:j]
		}
	}
	return last, seen
}

// parseXFFHop reads one X-Forwarded-For entry: "192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:443".
func parseXFFHop(s string) (netip.Addr, bool) {
	var host string
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !isPort(rest[1:])) {
			return netip.Addr{}, false
		}
		host = s[1:end]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	host, port, ok := strings.Cut(s, ":")
	if !ok || !isPort(port) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// hop is one element of a forwarding header: an address, or not ok when
// it could not be read.
type hop struct {
	addr netip.Addr
	ok   bool
}

// walkForwarded walks Forwarded values from the right, as walkXFF does.
func (id *Identifier) walkForwarded(values []string, peer netip.Addr) (client netip.Addr, seen bool) {
	if len(values) == 0 {
		return peer, false
	}
	var buf [8]hop
	hops := buf[:0]
	for _, v := range values {
		hops = appendForwarded(hops, v)
	}
	last := peer
	for i := len(hops) - 1; i >= 0; i-- {
		h := hops[i]
		if !h.ok {
			return last, true
		}
		if !id.isTrusted(h.addr) {
			return h.addr, true
		}
		last = h.addr
	}
	return last, len(hops) > 0
}

// appendForwarded appends a hop for each non-empty element of one
// Forwarded field line. A quoted-string never spans lines; one left open
// runs to the end of its line, making the rest of the line one bad
// element.
func appendForwarded(hops []hop, s string) []hop {
	for s != "" {
		var elem string
		elem, s = cutOutsideQuotes(s, ',')
		if h, nonEmpty := parseForwardedElement(elem); nonEmpty {
			hops = append(hops, h)
		}
	}
	return hops
}

// cutOutsideQuotes splits s at the first sep outside a quoted-string.
func cutOutsideQuotes(s string, sep byte) (before, after string) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == sep:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// parseForwardedElement reads one forwarded-element ("for=...;proto=...")
// for its for= node. nonEmpty is false for an element with no pairs at
// all.
func parseForwardedElement(elem string) (h hop, nonEmpty bool) {
	var node string
	haveFor, bad := false, false
	for elem != "" {
		var pair string
		pair, elem = cutOutsideQuotes(elem, ';')
		pair = trimOWS(pair)
		if pair == "" {
			continue
		}
		nonEmpty = true
		name, value, ok := strings.Cut(pair, "=")
		if !ok || !isToken(name) {
			bad = true
			continue
		}
		if value, ok = forwardedValue(value); !ok {
			bad = true
			continue
		}
		if strings.EqualFold(name, "for") {
			if haveFor {
				bad = true // a parameter must not repeat within an element
			}
			haveFor, node = true, value
		}
	}
	if bad || !haveFor {
		return hop{}, nonEmpty
	}
	a, ok := parseForwardedNode(node)
	return hop{addr: a, ok: ok}, nonEmpty
}

// forwardedValue reads a token or a quoted-string.
func forwardedValue(v string) (string, bool) {
	if v == "" || v[0] != '"' {
		return v, isToken(v)
	}
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	escaped := false
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\':
			if i+1 == len(inner) || !isQuotedPairChar(inner[i+1]) {
				return "", false
			}
			escaped = true
			i++
		case c == '"' || !isQDText(c):
			return "", false
		}
	}
	if !escaped {
		return inner, true
	}
	var b strings.Builder
	b.Grow(len(inner))
	for i := 0; i < len(inner); i++ {
		if inner[i] == '\\' {
			i++
		}
		b.WriteByte(inner[i])
	}
	return b.String(), true
}

// parseForwardedNode reads an RFC 7239 node: "192.0.2.1", "192.0.2.1:80",
// "[2001:db8::1]" or "[2001:db8::1]:443" (the port may be obfuscated,
// "_p"). "unknown", obfuscated names ("_hidden") and anything else are not
// ok.
func parseForwardedNode(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !isNodePort(rest[1:])) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	host, port, hasPort := strings.Cut(s, ":")
	if hasPort && !isNodePort(port) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// isPort reports whether s is 1 to 5 digits.
func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isNodePort reports whether s is an RFC 7239 node-port: a port or an
// obfuscated port ("_" followed by letters, digits, ".", "_" and "-").
func isNodePort(s string) bool {
	if s == "" || s[0] != '_' {
		return isPort(s)
	}
	if len(s) == 1 {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// trimOWS trims spaces and tabs from both ends of s.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// isToken reports whether s is an HTTP token (RFC 9110), as header names
// and unquoted parameter values are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// isQDText reports whether c may stand unescaped in a quoted-string.
func isQDText(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || (0x23 <= c && c <= 0x5b) || (0x5d <= c && c <= 0x7e) || c >= 0x80
}

// isQuotedPairChar reports whether c may follow a backslash in a
// quoted-string.
func isQuotedPairChar(c byte) bool {
	return c == '\t' || c == ' ' || (0x21 <= c && c <= 0x7e) || c >= 0x80
}
