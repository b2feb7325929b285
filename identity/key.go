package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/braces"
)

// Header is how an Identifier reads a request's header fields. Values
// returns every value of the named field, one per field line, or nil; a
// nil Header has no fields. The name is given in canonical form ("X-User-Id", "X-Forwarded-For", as
// textproto.CanonicalMIMEHeaderKey writes it). http.Header satisfies it; a
// door whose fields are stored otherwise (gRPC metadata, in lower case)
// adapts in a line.
type Header interface {
	Values(name string) []string
}

// values returns h's values of name; a nil h has none.
func values(h Header, name string) []string {
	if h == nil {
		return nil
	}
	return h.Values(name)
}

// MaxKeyLen is the longest caller key Key and KeyFor return, in bytes: a
// header scope's, "header:" and a value of sluice.MaxAttrLen bytes (a
// user's is "user:" and a user id of MaxUserIDLen bytes, an attribute's
// "attr:" and a value of sluice.MaxAttrLen, a path parameter's "param:"
// and one of sluice.MaxAttrLen, made by the Door). An API key's is 36
// bytes whatever the key's length (a hash), an IP key's at most 46 ("ip:",
// an IPv6 address and a prefix length), the global key 6. A longer
// identity is refused (ErrIdentityTooLong: 400, or InvalidArgument over
// gRPC) rather than hashed or cut: the key an operator writes in an
// override or a reset stays the user id itself, the client learns at once
// that its identity is unusable, and no two ids are ever counted as one.
// So a key a door stores costs at most MaxKeyLen bytes, plus the rule's
// name, whatever a client sends; at a level of a group counted within its
// tenant (sluice.NestedKey), two such keys and 3 bytes.
const MaxKeyLen = len("header:") + sluice.MaxAttrLen

// Caller is who a request says it comes from. An empty field means "not
// given": a caller with neither is anonymous.
type Caller struct {
	// UserID identifies the user, for rules scoped "user".
	UserID string
	// APIKey is the caller's API key, for rules scoped "api_key".
	APIKey string
	// Plan is the caller's plan, for rules with a plan (sluice.Rule.Plan);
	// empty for none. It must be a valid plan name (sluice.ValidPlan).
	Plan string

	// The attributes With sets, for rules scoped attr:NAME, held in place
	// so that a Caller returned by value allocates nothing.
	attrs  [MaxAttrs]attr
	nattrs uint8 // how many are set; MaxAttrs+1 once one more was asked for
}

// MaxAttrs is how many attributes (Caller.With) a Caller holds.
const MaxAttrs = 4

// attr is one attribute of a Caller.
type attr struct{ name, value string }

// With returns c with the attribute name set to value, for rules scoped
// attr:NAME (sluice.ScopeAttr): an organisation, a team, a claim of a
// token the program has verified. An empty value is no attribute: the
// caller is then counted by its IP address under such a rule. A Caller
// holds up to MaxAttrs attributes in place, so an IdentityFunc returning
// one allocates nothing; setting one more makes KeyFor refuse the caller
// under any attr: rule (a program's error, not a client's).
func (c Caller) With(name, value string) Caller {
	for i := 0; i < int(min(c.nattrs, MaxAttrs)); i++ {
		if c.attrs[i].name == name {
			c.attrs[i].value = value
			return c
		}
	}
	if c.nattrs >= MaxAttrs {
		c.nattrs = MaxAttrs + 1
		return c
	}
	c.attrs[c.nattrs] = attr{name, value}
	c.nattrs++
	return c
}

// Attr returns the value of c's attribute name, "" when it has none.
func (c Caller) Attr(name string) string {
	for i := 0; i < int(min(c.nattrs, MaxAttrs)); i++ {
		if c.attrs[i].name == name {
			return c.attrs[i].value
		}
	}
	return ""
}

// Identifier turns a request into the key a rule's budget is counted
// under: Key. Make one with New. It is immutable and safe for concurrent
// use.
//
// # Who the caller is
//
// The identity comes from a Caller the program supplies (KeyFor) or from
// the user and API key headers (Key). An identity header is only as
// trustworthy as whatever sets it. Taken straight from the client, it is a
// claim, not a proof: a client that sends someone else's X-User-ID spends
// that user's budget (and can lock them out), and a client that invents a
// fresh X-User-ID on every request gets a fresh budget every time. Rate
// limiting by header is sound only when something the client cannot get
// around sets the header. So either
//
//   - supply the Caller, from credentials an earlier layer has verified
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
// The client address (ClientIP) is the connection's peer. The configured
// forwarding header (X-Forwarded-For by default, or Forwarded) is believed
// only when that peer is a trusted proxy; then the client is the right-most
// address in it that is not itself a trusted proxy, because each trusted
// proxy appends the address it received the request from, and everything to
// the left of that is whatever the client chose to send. The other header
// is ignored from every peer. A client that spoofs forwarding headers
// therefore gains nothing: from an untrusted peer they are ignored, through
// a trusted proxy its invented addresses sit to the left of the real one,
// and the header its proxy does not maintain is never read. A client whose
// own address is a trusted proxy's is trusted: it can name any address.
type Identifier struct {
	userHeader, apiKeyHeader string // canonical header keys
	trusted                  []netip.Prefix
	forwarded                bool // read Forwarded rather than X-Forwarded-For
	v6bits                   int
	headersTrustedOnly       bool
	planHeader               string // canonical; empty: no plan header is read
}

// New validates cfg and returns its Identifier; zero fields take their
// defaults (Config.WithDefaults). A header name that is not an HTTP token,
// an invalid trusted proxy prefix, an unknown forwarding header and an
// IPv6Prefix outside 1 to 128 are errors.
func New(cfg Config) (*Identifier, error) {
	cfg = cfg.WithDefaults()
	id := &Identifier{
		userHeader:         cfg.UserHeader,
		apiKeyHeader:       cfg.APIKeyHeader,
		forwarded:          cfg.ForwardingHeader == Forwarded,
		v6bits:             cfg.IPv6Prefix,
		headersTrustedOnly: cfg.HeadersFromTrustedProxiesOnly,
	}
	if cfg.PlanHeader != "" {
		if !isToken(cfg.PlanHeader) {
			return nil, fmt.Errorf("sluice/identity: PlanHeader: want an HTTP header name, got %q", cfg.PlanHeader)
		}
		id.planHeader = textproto.CanonicalMIMEHeaderKey(cfg.PlanHeader)
	}
	for _, h := range []*string{&id.userHeader, &id.apiKeyHeader} {
		if !isToken(*h) {
			return nil, fmt.Errorf("sluice/identity: want an HTTP header name, got %q", *h)
		}
		*h = textproto.CanonicalMIMEHeaderKey(*h)
	}
	if !cfg.ForwardingHeader.Valid() {
		return nil, fmt.Errorf("sluice/identity: ForwardingHeader: want %q or %q, got %q", XForwardedFor, Forwarded, string(cfg.ForwardingHeader))
	}
	if id.v6bits < 1 || id.v6bits > 128 {
		return nil, fmt.Errorf("sluice/identity: IPv6Prefix: want a prefix length from 1 to 128, got %d", cfg.IPv6Prefix)
	}
	id.trusted = make([]netip.Prefix, 0, len(cfg.TrustedProxies))
	for _, p := range cfg.TrustedProxies {
		p, err := normalizeProxy(p)
		if err != nil {
			return nil, fmt.Errorf("sluice/identity: %w", err)
		}
		id.trusted = append(id.trusted, p)
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

// PeerTrusted reports whether peer, the connection's address, is a trusted
// proxy; an invalid address (no peer) is not.
func (id *Identifier) PeerTrusted(peer netip.Addr) bool {
	return peer.IsValid() && id.isTrusted(peer.Unmap().WithZone(""))
}

// ParsePeer reads a connection's peer address as net/http's
// Request.RemoteAddr holds it: "host:port", or a bare address. IPv4-mapped
// IPv6 is read as IPv4 and a zone is dropped. Anything else (a Unix
// socket's "@", an empty string) is an ErrNoPeerAddr naming the text.
func ParsePeer(remote string) (netip.Addr, error) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		a = ap.Addr()
	} else if a, err = netip.ParseAddr(remote); err != nil {
		if len(remote) > 64 {
			remote = remote[:64] + "..."
		}
		return netip.Addr{}, fmt.Errorf("%w: %q", ErrNoPeerAddr, remote)
	}
	return a.Unmap().WithZone(""), nil
}

// Key returns the key the caller of a request is counted under by a rule
// of the given scope, its identity read from the headers h. remote is the
// connection's peer address as net/http's Request.RemoteAddr and
// net.Addr.String give it ("host:port", or a bare address); it is parsed
// (ParsePeer) only when needed, and one that does not parse is an
// ErrNoPeerAddr only when an IP key is needed:
//
//	ScopeUser    "user:" + the user id
//	ScopeAPIKey  "key:" + 32 hex digits of the SHA-256 of the API key
//	ScopeIP      "ip:" + the client IP: "ip:192.0.2.1", or for IPv6 its
//	             prefix, "ip:2001:db8:1:2::/64"
//	ScopeGlobal  "global"
//	header:NAME  "header:" + the header's value, read only when the peer
//	             is a trusted proxy, as the plan header is (Plan)
//	attr:NAME    "attr:" + the attribute's value (Caller.With; KeyFor only)
//	param:NAME   "" (the Door makes the key, from the path it matched)
//
// The prefixes differ by scope, so no identity can pose as another kind
// (a user named "ip:192.0.2.1" is "user:ip:192.0.2.1"). API keys are
// hashed so that the secrets themselves are never stored in the limiter's
// state or shown in its output; user ids are kept as given, for
// readability, and bounded: one longer than MaxUserIDLen (or an API key
// longer than MaxAPIKeyLen) is an ErrIdentityTooLong, not silently cut, so
// that no key is longer than MaxKeyLen,
// and an identity header sent twice is an ErrAmbiguousIdentity; both match
// ErrBadIdentity. Surrounding spaces and tabs in a header value are
// ignored.
//
// A caller without a user id (under ScopeUser), an API key (under
// ScopeAPIKey), the header (under header:NAME, or from a peer that is not
// a trusted proxy) or the attribute (under attr:NAME) is counted by its IP
// key. A header or attribute value is bounded as a user id is, by
// sluice.MaxAttrLen (ErrIdentityTooLong), and a header given twice is an
// ErrAmbiguousIdentity. Key does not allocate beyond the key it returns
// (a header scope's name is in canonical form in a compiled rule).
func (id *Identifier) Key(scope sluice.Scope, remote string, h Header) (string, error) {
	return id.key(scope, remote, h, Caller{}, false)
}

// KeyFor is Key for a caller the program has identified itself: who's
// UserID and APIKey stand for the identity headers, which are not read
// (HeadersFromTrustedProxiesOnly does not apply). An anonymous who is
// counted by its IP key, found as Key finds it.
func (id *Identifier) KeyFor(scope sluice.Scope, who Caller, remote string, h Header) (string, error) {
	return id.key(scope, remote, h, who, true)
}

func (id *Identifier) key(scope sluice.Scope, remote string, h Header, who Caller, supplied bool) (string, error) {
	switch scope {
	case sluice.ScopeGlobal:
		return "global", nil
	case sluice.ScopeIP:
		return id.ipKey(remote, h)
	case sluice.ScopeUser, sluice.ScopeAPIKey:
	default:
		return id.attrKey(scope, remote, h, who, supplied)
	}
	var v string
	if supplied {
		v = who.UserID
		if scope == sluice.ScopeAPIKey {
			v = who.APIKey
		}
	} else if !id.headersTrustedOnly || id.remoteTrusted(remote) {
		name := id.userHeader
		if scope == sluice.ScopeAPIKey {
			name = id.apiKeyHeader
		}
		vs := values(h, name)
		if len(vs) > 1 {
			return "", fmt.Errorf("%w: %s", ErrAmbiguousIdentity, name)
		}
		if len(vs) == 1 {
			v = trimOWS(vs[0])
		}
	}
	if v == "" {
		return id.ipKey(remote, h)
	}
	if scope == sluice.ScopeUser {
		if len(v) > MaxUserIDLen {
			return "", fmt.Errorf("%w: the user id is %d bytes, over %d", ErrIdentityTooLong, len(v), MaxUserIDLen)
		}
		return "user:" + v, nil
	}
	if len(v) > MaxAPIKeyLen {
		return "", fmt.Errorf("%w: the API key is %d bytes, over %d", ErrIdentityTooLong, len(v), MaxAPIKeyLen)
	}
	return hashAPIKey(v), nil
}

// attrKey is key for the scopes of a header, an attribute or a path
// parameter.
func (id *Identifier) attrKey(scope sluice.Scope, remote string, h Header, who Caller, supplied bool) (string, error) {
	var (
		v, kind string
		name    = scope.Header()
	)
	switch {
	case name != "":
		kind = "header:"
		if id.remoteTrusted(remote) {
			name = textproto.CanonicalMIMEHeaderKey(name)
			vs := values(h, name)
			if len(vs) > 1 {
				return "", fmt.Errorf("%w: %s", ErrAmbiguousIdentity, name)
			}
			if len(vs) == 1 {
				v = trimOWS(vs[0])
			}
		}
	case scope.Attr() != "":
		kind, name = "attr:", scope.Attr()
		if supplied {
			if who.nattrs > MaxAttrs {
				return "", fmt.Errorf("sluice/identity: the Caller was given more than %d attributes (Caller.With)", MaxAttrs)
			}
			v = who.Attr(name)
		}
	case scope.Param() != "":
		return "", nil // the Door's
	default:
		return "", fmt.Errorf("%w %q", ErrUnknownScope, string(scope))
	}
	if v == "" {
		return id.ipKey(remote, h)
	}
	if len(v) > sluice.MaxAttrLen {
		return "", fmt.Errorf("%w: %s is %d bytes, over %d", ErrIdentityTooLong, name, len(v), sluice.MaxAttrLen)
	}
	return kind + v, nil
}

// ShowKey returns how a caller key (Key's result, as stored) is shown to
// an operator, in the form ParseKey reads back to the same key: an API
// key's hash as "keyhash:" and its hex digits (the stored "key:" prefix
// would read as a raw API key, and be hashed again), a level's key within
// its tenant (backend.NestedKey: a user's within an organisation, in a
// group of rules) as "{" + the tenant's key + "}" + its own, both shown as
// ShowKey shows them ("{attr:acme}user:alice"), with '%', '{' and '}' in
// the tenant's written as %25, %7B and %7D; every other key as it is.
func ShowKey(key string) string {
	if tenant, own, ok := sluice.SplitNestedKey(key); ok {
		return "{" + braces.Escape(ShowKey(tenant)) + "}" + ShowKey(own)
	}
	if h, ok := strings.CutPrefix(key, "key:"); ok {
		return "keyhash:" + h
	}
	return key
}

// hashAPIKey returns the caller key of the API key v: "key:" and the first
// 16 bytes of its SHA-256 in hex.
func hashAPIKey(v string) string {
	sum := sha256.Sum256([]byte(v))
	var buf [4 + 32]byte
	copy(buf[:], "key:")
	hex.Encode(buf[4:], sum[:16])
	return string(buf[:])
}

// remoteTrusted reports whether the peer remote is a trusted proxy; one
// that does not parse is not.
func (id *Identifier) remoteTrusted(remote string) bool {
	peer, err := ParsePeer(remote)
	return err == nil && id.isTrusted(peer)
}

func (id *Identifier) ipKey(remote string, h Header) (string, error) {
	peer, err := ParsePeer(remote)
	if err != nil {
		return "", err
	}
	a, err := id.ClientIP(peer, h)
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

// ClientIP returns the address of the client that sent a request whose
// connection's peer is peer, IPv4-mapped IPv6 read as IPv4, without a zone.
//
// It is the peer unless the peer is a trusted proxy. Then the configured
// forwarding header is read: X-Forwarded-For (a comma separated list of
// addresses; several header lines are concatenated in order) or Forwarded
// (RFC 7239; the for= parameter of each element, IPv6 in brackets inside
// quotes, ports allowed). The other header is never read. Walking the header
// from the right, each trusted proxy address is stepped over, and the first
// address that is not a trusted proxy is the client. When every address is
// a trusted proxy, the left-most is the client; when the header is absent or
// empty, the peer is.
//
// A hop the walk cannot read before it finds the client — garbage, an
// address with a zone, an element without for=, a quoted-string left open,
// the obfuscated identifiers "unknown" and "_name" of RFC 7239 — is an
// ErrBadForwarding (it matches ErrBadIdentity: the doors answer 400): the
// client cannot be told, and falling back to the last trusted hop would
// count the request on a proxy's own address, whose budget every client
// behind that proxy shares (a client could then spend it for all of them
// with one malformed header). Unreadable hops to the left of the client
// are never reached and do not matter. Empty list elements are skipped.
// X-Forwarded-For entries may be bare addresses, "[v6]", "[v6]:port" or
// "v4:port"; Forwarded follows the RFC's node syntax strictly.
//
// The error is an ErrNoPeerAddr when peer is not a valid address, an
// ErrBadForwarding when the header read does not say who the client is.
func (id *Identifier) ClientIP(peer netip.Addr, h Header) (netip.Addr, error) {
	if !peer.IsValid() {
		return netip.Addr{}, ErrNoPeerAddr
	}
	peer = peer.Unmap().WithZone("")
	if !id.isTrusted(peer) {
		return peer, nil
	}
	name := "X-Forwarded-For"
	var a netip.Addr
	var ok bool
	if id.forwarded {
		name = "Forwarded"
		a, ok = id.walkForwarded(values(h, name), peer)
	} else {
		a, ok = id.walkXFF(values(h, name), peer)
	}
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: %s from trusted proxy %v", ErrBadForwarding, name, peer)
	}
	return a, nil
}
